// 2-D convolution kernels (fp32) in NCHW and NCHWc8 layouts, their weight packing, and the kernel list.
// Weights come in ONNX layout [Cout][Cin/groups][KH][KW]; every kernel pre-packs them once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessel/rt/epilogue.h"
#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

struct Pool2dShape;  // tessel/rt/pool.h

/// Geometry of one convolution (ONNX Conv attributes plus the input shape).
struct Conv2dShape {
  int64_t batch = 1;
  int64_t in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  /// Output height / width (floor mode, as ONNX).
  int64_t out_h() const { return (in_h + pad_top + pad_bottom - dilation_h * (kernel_h - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (in_w + pad_left + pad_right - dilation_w * (kernel_w - 1) - 1) / stride_w + 1; }
  int64_t in_per_group() const { return in_channels / groups; }
  int64_t out_per_group() const { return out_channels / groups; }
  /// True for depthwise convolution with channel multiplier 1.
  bool is_depthwise() const { return groups == in_channels && groups == out_channels && groups > 1; }
  /// True for a 1x1, stride-1, unpadded convolution: each output pixel reads only its own input pixel.
  bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_top == 0 && pad_left == 0 &&
           pad_bottom == 0 && pad_right == 0;
  }
  /// Multiply-accumulates of the whole convolution.
  double macs() const {
    return double(batch) * out_channels * out_h() * out_w() * in_per_group() * kernel_h * kernel_w;
  }
};

/// Data layouts the kernels read and write.
enum class ConvLayout : uint8_t {
  NCHW,    ///< [N][C][H][W]
  NCHWc8,  ///< [N][ceil(C/8)][H][W][8], channels zero-padded to a multiple of 8
};

/// Signature of a weight packer: writes packed_weight_size(shape) floats to `packed`.
using ConvPackFn = void (*)(const Conv2dShape& shape, const float* weights, float* packed);
/// Signature of a convolution: out = epilogue(conv(in, weights)) for the whole batch. In NCHWc8 the
/// epilogue's residual has the output's NCHWc8 layout; its bias has out_channels entries.
using ConvRunFn = void (*)(const Conv2dShape& shape, const float* in, const float* packed_weights,
                           float* out, const Epilogue& ep, ThreadPool* pool);

/// One convolution kernel: a name carrying its parameters, an applicability predicate, its packer.
struct Conv2dKernel {
  const char* name;
  ConvLayout layout;
  bool (*applicable)(const Conv2dShape&);
  size_t (*packed_weight_size)(const Conv2dShape&);
  ConvPackFn pack_weights;
  ConvRunFn run;
  /// Fast only with AVX-512 (without it, a plain-loop fallback for correctness): neither selected nor
  /// offered to --tune for other targets.
  bool avx512_only = false;
  /// An NCHWc8 kernel whose input stays NCHW (the few-channel stems): only its output is blocked.
  bool nchw_input = false;
};

/// Every convolution kernel, best-first within a layout (selection, tests and benchmarks share it).
const std::vector<Conv2dKernel>& conv2d_kernels();
/// The kernel called `name`, or null.
const Conv2dKernel* find_conv2d_kernel(const char* name);
/// Packs weights[m][k] * scale[k] (k over in_channels x kernel taps: a per-input-channel scale, k / taps) with
/// kernel k's packer into `packed`: a convolution of x * scale (squeeze-and-excitation's channel scale folded
/// into the pointwise convolution after it, once per run). groups == 1.
void pack_scaled_conv_weights(const Conv2dKernel& k, const Conv2dShape& s, const float* weights, const float* scale,
                              float* packed);
/// The first applicable kernel for `layout` (conv2d_nchw_im2col_gemm_avx2 / _nchwc8_ generic always apply)
/// that pays off on this shape. `avx512`: the code will run on a CPU with AVX-512 (built for such a
/// -march), where conv2d_nchw_pixel_tile is taken for long reductions.
const Conv2dKernel* select_conv2d_kernel(const Conv2dShape& shape, ConvLayout layout, bool avx512 = false);

// Individual kernels (also reachable through the list).

/// General fallback: implicit im2col packed straight into GEMM panels, then sgemm with packed weights.
void conv2d_nchw_im2col_gemm_avx2(const Conv2dShape&, const float* in, const float* packed, float* out,
                                  const Epilogue&, ThreadPool*);
size_t conv2d_nchw_im2col_gemm_packed_size(const Conv2dShape&);
void conv2d_nchw_im2col_gemm_pack(const Conv2dShape&, const float* weights, float* packed);

/// Pixel tiles (groups == 1, any geometry): 7 output pixels x 64 output channels per register tile,
/// input broadcast, weights packed [Cout/64][K][64]; 1x1 stride-1 convs read the input in place, others
/// through im2col panels. AVX-512 (a plain-loop fallback otherwise).
void conv2d_nchw_pixel_tile(const Conv2dShape&, const float* in, const float* packed, float* out,
                            const Epilogue&, ThreadPool*);
bool conv2d_nchw_pixel_tile_applicable(const Conv2dShape&);
size_t conv2d_nchw_pixel_tile_packed_size(const Conv2dShape&);
void conv2d_nchw_pixel_tile_pack(const Conv2dShape&, const float* weights, float* packed);

/// 1x1, stride 1, no padding: the input plane is the GEMM's B operand as is.
void conv2d_nchw_1x1_gemm_avx2(const Conv2dShape&, const float* in, const float* packed, float* out,
                               const Epilogue&, ThreadPool*);
/// conv2d_nchw_1x1_gemm_avx2 (same packed weights) writing output channel c at out + c * out_plane_stride: a
/// branch of ShuffleNet's block straight into its places after the channel shuffle. Batch 1, groups 1.
void conv2d_nchw_1x1_gemm_strided(const Conv2dShape&, const float* in, const float* packed, float* out,
                                  int64_t out_plane_stride, const Epilogue&, ThreadPool*);

/// A 1x1 convolution of a 1x1 map (squeeze-and-excitation's two convolutions after the global pool; groups == 1,
/// any batch): per image the GEMV y[Cout] = W[Cout x Cin] x[Cin] on the FC layers' path (sgemm_packed_b with
/// M = 1), weights packed once as 16-channel column panels of W^T, the bias per column, the epilogue on the way
/// out; threaded only from 64k multiply-adds. conv2d_nchw_1x1_gemm_avx2 ran it as a GEMM whose one column was
/// padded to a 32-wide tile (EfficientNet-B0's 48 -> 1152: 28 us at 2 threads, Zen 4).
void conv2d_nchw_1x1_gemv(const Conv2dShape&, const float* in, const float* packed, float* out, const Epilogue&,
                          ThreadPool*);
bool conv2d_nchw_1x1_gemv_applicable(const Conv2dShape&);
size_t conv2d_nchw_1x1_gemv_packed_size(const Conv2dShape&);
void conv2d_nchw_1x1_gemv_pack(const Conv2dShape&, const float* weights, float* packed);

/// Pixels as the GEMM's rows (groups == 1, any geometry; for small maps): out^T[pixels x Cout] =
/// col^T[pixels x K] * W^T[K x Cout] in 6-pixel row panels packed by implicit im2col, weights packed once as
/// 16-channel column panels, then transposed into NCHW with the epilogue. A 7x7 map is 49 pixels: 54 rows
/// of 6-row panels against 64 columns of 16-column panels the other way round.
void conv2d_nchw_gemm_pixel_rows(const Conv2dShape&, const float* in, const float* packed, float* out,
                                 const Epilogue&, ThreadPool*);
bool conv2d_nchw_gemm_pixel_rows_applicable(const Conv2dShape&);
size_t conv2d_nchw_gemm_pixel_rows_packed_size(const Conv2dShape&);
void conv2d_nchw_gemm_pixel_rows_pack(const Conv2dShape&, const float* weights, float* packed);

/// Atrous convolution (groups == 1, stride 1, dilation > 1) as one GEMM per kernel tap over the outputs for
/// which that tap reads the map, not padding; for dilations large against the map (DeepLabV3's ASPP), where
/// at least a fifth of im2col's products would multiply padding. Weights packed per tap (pack_a layout).
void conv2d_nchw_dilated_taps(const Conv2dShape&, const float* in, const float* packed, float* out, const Epilogue&,
                              ThreadPool*);
bool conv2d_nchw_dilated_taps_applicable(const Conv2dShape&);
/// The share of im2col's products that read the map rather than padding (1 for an undilated "same" conv).
double conv2d_live_tap_share(const Conv2dShape&);
/// At most 80 % of the products read the map: the atrous kernel's per-tap GEMMs beat any kernel that computes
/// every tap (select-layout keeps such convs in NCHW for it).
bool conv2d_mostly_dead_taps(const Conv2dShape&);
size_t conv2d_nchw_dilated_taps_packed_size(const Conv2dShape&);
void conv2d_nchw_dilated_taps_pack(const Conv2dShape&, const float* weights, float* packed);

/// An inverted residual block as one step (runtime/src/conv_chain.cpp): a 1x1 expansion, a K x K depthwise
/// conv (stride S, dilation 1) and a 1x1 projection, computed in bands of output rows, each band by one thread
/// from the input rows it needs, so that each thread reads and writes only its own rows of every tensor. The
/// schedule (how many bands) is data of the compiled model.
struct ConvChain {
  Conv2dShape expand;     ///< 1x1, stride 1: C -> E channels on H x W
  Conv2dShape depthwise;  ///< depthwise K x K on the E channels, H x W -> OH x OW
  Conv2dShape project;    ///< 1x1, stride 1: E -> P channels on OH x OW
  int64_t min_bands = 2;  ///< bands of output rows: at least this many,
  int64_t bands_per_thread = 1;  ///< and with several threads at least this many per thread
};
/// Batch 1, the three shapes chained as above, square kernel and stride, K >= S, padding below K.
bool conv_chain_applicable(const ConvChain&);
/// Output rows per band with `threads` threads: OH over max(min_bands, bands_per_thread x threads) bands (threads > 1;
/// min_bands alone with one), rounded up; at most OH bands.
int64_t conv_chain_band_rows(const ConvChain&, int threads);
/// out = project(dw(expand(in))) with each stage's epilogue (the projection's residual: the output's layout).
/// packed_expand / packed_project: the 1x1 GEMM kernel's packing (conv2d_nchw_1x1_gemm_avx2); dw_weights: the
/// depthwise kernel's (ONNX layout).
void conv_chain_nchw(const ConvChain&, const float* in, const float* packed_expand, const float* dw_weights,
                     const float* packed_project, float* out, const Epilogue& ep_expand, const Epilogue& ep_dw,
                     const Epilogue& ep_project, ThreadPool* pool);

/// Depthwise (multiplier 1), any kernel/stride/pad/dilation, NCHW; weights are used unpacked.
void conv2d_nchw_depthwise_avx2(const Conv2dShape&, const float* in, const float* weights, float* out,
                                const Epilogue&, ThreadPool*);

/// Grouped convolution (groups > 1, not depthwise, up to 32 input channels per group, stride 1 or 2 along
/// rows, dilation 1), NCHW: per (image, group), register tiles of 8 output channels x a row's pixels over
/// padded scratch rows. Weights packed as [group][Cout_g/8][Cin_g][KH][KW][8].
void conv2d_nchw_grouped(const Conv2dShape&, const float* in, const float* packed, float* out, const Epilogue&,
                         ThreadPool*);
bool conv2d_nchw_grouped_applicable(const Conv2dShape&);
size_t conv2d_nchw_grouped_packed_size(const Conv2dShape&);
void conv2d_nchw_grouped_pack(const Conv2dShape&, const float* weights, float* packed);

/// Depthwise (multiplier 1), NCHWc8, channels in vector lanes.
void conv2d_nchwc8_depthwise_avx2(const Conv2dShape&, const float* in, const float* packed, float* out,
                                  const Epilogue&, ThreadPool*);
size_t conv2d_nchwc8_depthwise_packed_size(const Conv2dShape&);
void conv2d_nchwc8_depthwise_pack(const Conv2dShape&, const float* weights, float* packed);

/// Direct convolution in NCHWc8, register block 2 output-channel blocks x 6 pixels: dense, or grouped with
/// whole 8-channel blocks per group (two narrow groups merged into one block-diagonal group when they have 4
/// channels each, see conv2d_nchwc8_direct_applicable).
bool conv2d_nchwc8_direct_applicable(const Conv2dShape&);
void conv2d_nchwc8_direct_avx2(const Conv2dShape&, const float* in, const float* packed, float* out,
                               const Epilogue&, ThreadPool*);
size_t conv2d_nchwc8_direct_packed_size(const Conv2dShape&);
void conv2d_nchwc8_direct_pack(const Conv2dShape&, const float* weights, float* packed);

/// The 3x3 stems (at most 4 input channels, undilated) from an NCHW input into an NCHWc8 output: the NCHWc8
/// direct kernel's register tiles with one input value per tap (Conv2dKernel::nchw_input).
bool conv2d_stem_nchwc8_applicable(const Conv2dShape&);
void conv2d_stem_nchwc8_avx2(const Conv2dShape&, const float* in, const float* packed, float* out, const Epilogue&,
                             ThreadPool*);
size_t conv2d_stem_nchwc8_packed_size(const Conv2dShape&);
void conv2d_stem_nchwc8_pack(const Conv2dShape&, const float* weights, float* packed);

/// Direct NCHW convolution for few input channels (<= 4, not 1x1): the network stems. Any stride,
/// padding and dilation; weights packed as [Cout/8][Cin][KH][KW][8].
void conv2d_nchw_direct_small_cin(const Conv2dShape&, const float* in, const float* packed, float* out,
                                  const Epilogue&, ThreadPool*);
bool conv2d_nchw_direct_small_cin_applicable(const Conv2dShape&);
size_t conv2d_nchw_direct_small_cin_packed_size(const Conv2dShape&);
void conv2d_nchw_direct_small_cin_pack(const Conv2dShape&, const float* weights, float* packed);
/// The stem convolution followed by max pooling in one pass (Conv -> [activation] -> MaxPool): each
/// thread computes the conv rows of a slab of pooling rows into a small ring and pools them while they
/// are in cache, so the full-resolution conv output is never written. `ps` is the pooling of the conv
/// output (channels = Cout, in_h x in_w = the conv's output size); out is the pooled [N][Cout][PH][PW].
/// Weights are packed as for conv2d_nchw_direct_small_cin; ep applies before the pooling.
void conv2d_nchw_direct_small_cin_maxpool(const Conv2dShape&, const Pool2dShape& ps, const float* in,
                                          const float* packed, float* out, const Epilogue&, ThreadPool*);
bool conv2d_nchw_direct_small_cin_maxpool_applicable(const Conv2dShape&, const Pool2dShape& ps);
/// Winograd F(4x4, 3x3) for 3x3 stride-1 dilation-1 groups-1 convs, NCHW; the weight transform
/// (36 x Cout x Cin) is done at pack time. Error is a few times that of direct conv (see tests).
void conv2d_winograd_f43_avx2(const Conv2dShape&, const float* in, const float* packed, float* out,
                              const Epilogue&, ThreadPool*);
size_t conv2d_winograd_f43_packed_size(const Conv2dShape&);
void conv2d_winograd_f43_pack(const Conv2dShape&, const float* weights, float* packed);
/// The same in NCHWc8 (input and output channels multiples of 8), on the same packed weights: the input
/// windows are 8-channel vector loads, transposed into the tiles-in-lanes operands after their transform,
/// and each output pixel is stored as one vector of channels.
bool conv2d_winograd_f43_nchwc8_applicable(const Conv2dShape&);
void conv2d_winograd_f43_nchwc8_avx2(const Conv2dShape&, const float* in, const float* packed, float* out,
                                     const Epilogue&, ThreadPool*);

// Layout reorders.

/// [N][C][H][W] -> [N][ceil(C/8)][H][W][8] with zero padding channels.
void reorder_nchw_to_nchwc8(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                            ThreadPool* pool = nullptr);
/// [N][ceil(C/8)][H][W][8] -> [N][C][H][W] (padding channels dropped).
void reorder_nchwc8_to_nchw(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                            ThreadPool* pool = nullptr);
/// Floats of an NCHWc8 tensor.
inline size_t nchwc8_size(int64_t batch, int64_t channels, int64_t hw) {
  return static_cast<size_t>(batch * ((channels + 7) / 8) * 8 * hw);
}

}  // namespace tessel::rt
