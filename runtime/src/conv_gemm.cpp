// Convolution as GEMM: implicit im2col packed straight into 16-column GEMM panels, and 1x1 convs.
#include <algorithm>
#include <cstring>

#include "tessel/rt/conv.h"
#include "tessel/rt/gemm.h"

namespace tessel::rt {
namespace {

// Builds the B panels of C[Cout_g x OH*OW] = W[Cout_g x K] * col[K x OH*OW] from one group's input
// planes, K = Cin_g * KH * KW, without materialising col.
class Im2colPanelPacker final : public BPanelPacker {
 public:
  Im2colPanelPacker(const Conv2dShape& s, const float* in_group) : s_(s), in_(in_group), ow_(s.out_w()) {}

  void pack_panel(int64_t j0, int nr, float* dst) const override {
    // Cut the 16 output pixels into runs along one output row.
    struct Run { int64_t oh, ow, len, col; };
    Run runs[kGemmNR];
    int n_runs = 0;
    for (int64_t j = 0; j < nr;) {
      int64_t p = j0 + j, oh = p / ow_, ow = p % ow_;
      int64_t len = std::min<int64_t>(nr - j, ow_ - ow);
      runs[n_runs++] = {oh, ow, len, j};
      j += len;
    }
    const int64_t H = s_.in_h, W = s_.in_w, sh = s_.stride_h, sw = s_.stride_w;
    float* row = dst;
    for (int64_t c = 0; c < s_.in_per_group(); ++c) {
      const float* plane = in_ + c * H * W;
      for (int64_t ky = 0; ky < s_.kernel_h; ++ky)
        for (int64_t kx = 0; kx < s_.kernel_w; ++kx, row += kGemmNR) {
          for (int r = 0; r < n_runs; ++r) {
            const Run& run = runs[r];
            float* d = row + run.col;
            const int64_t ih = run.oh * sh - s_.pad_top + ky * s_.dilation_h;
            if (ih < 0 || ih >= H) {
              std::fill(d, d + run.len, 0.0f);
              continue;
            }
            const float* src = plane + ih * W;
            const int64_t base = run.ow * sw - s_.pad_left + kx * s_.dilation_w;  // iw of t = 0
            int64_t lo = base >= 0 ? 0 : (-base + sw - 1) / sw;
            int64_t hi = base >= W ? 0 : std::min(run.len, (W - 1 - base) / sw + 1);
            lo = std::min(lo, run.len);
            hi = std::max(hi, lo);
            std::fill(d, d + lo, 0.0f);
            if (sw == 1) {
              std::memcpy(d + lo, src + base + lo, (hi - lo) * sizeof(float));
            } else {
              for (int64_t t = lo; t < hi; ++t) d[t] = src[base + t * sw];
            }
            std::fill(d + hi, d + run.len, 0.0f);
          }
          std::fill(row + nr, row + kGemmNR, 0.0f);
        }
    }
  }

 private:
  const Conv2dShape& s_;
  const float* in_;
  int64_t ow_;
};

int64_t group_k(const Conv2dShape& s) { return s.in_per_group() * s.kernel_h * s.kernel_w; }

// The epilogue of one (image, group) slice of an NCHW output.
Epilogue slice_epilogue(const Epilogue& ep, int64_t channel0, int64_t offset) {
  Epilogue e = ep;
  if (e.bias) e.bias += channel0;
  if (e.residual) e.residual += offset;
  e.residual_ld = 0;
  e.bias_per_column = false;
  return e;
}

}  // namespace

size_t conv2d_nchw_im2col_gemm_packed_size(const Conv2dShape& s) {
  return s.groups * packed_a_size(s.out_per_group(), group_k(s));
}

void conv2d_nchw_im2col_gemm_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t m = s.out_per_group(), k = group_k(s);
  for (int64_t g = 0; g < s.groups; ++g)
    pack_a(false, m, k, weights + g * m * k, k, packed + g * packed_a_size(m, k));
}

void conv2d_nchw_im2col_gemm_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                  const Epilogue& ep, ThreadPool* pool) {
  const int64_t m = s.out_per_group(), k = group_k(s), hw_out = s.out_h() * s.out_w();
  const int64_t in_plane = s.in_h * s.in_w;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      const float* in_g = in + (n * s.in_channels + g * s.in_per_group()) * in_plane;
      const int64_t out_off = (n * s.out_channels + g * m) * hw_out;
      Im2colPanelPacker packer(s, in_g);
      sgemm_packed_a_custom_b(m, hw_out, k, 1.0f, packed + g * packed_a_size(m, k), packer, 0.0f,
                              out + out_off, hw_out, slice_epilogue(ep, g * m, out_off), pool);
    }
}

void conv2d_nchw_1x1_gemm_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                               const Epilogue& ep, ThreadPool* pool) {
  const int64_t m = s.out_per_group(), k = s.in_per_group(), hw = s.in_h * s.in_w;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      const float* in_g = in + (n * s.in_channels + g * k) * hw;
      const int64_t out_off = (n * s.out_channels + g * m) * hw;
      sgemm_packed_a(m, hw, k, 1.0f, packed + g * packed_a_size(m, k), false, in_g, hw, 0.0f,
                     out + out_off, hw, slice_epilogue(ep, g * m, out_off), pool);
    }
}

}  // namespace tessel::rt
