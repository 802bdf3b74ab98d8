// Convolution as GEMM: implicit im2col packed straight into 16-column GEMM panels, and 1x1 convs.
#include <algorithm>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue.h"
#include "tessel/rt/gemm.h"
#include "im2col.h"

namespace tessel::rt {
namespace {

// Builds the B panels of C[Cout_g x OH*OW] = W[Cout_g x K] * col[K x OH*OW] from one group's input
// planes, K = Cin_g * KH * KW, without materialising col.
class Im2colPanelPacker final : public BPanelPacker {
 public:
  Im2colPanelPacker(const Conv2dShape& s, const float* in_group) : s_(s), in_(in_group) {}
  void pack_panel(int64_t j0, int nr, float* dst) const override {
    detail::pack_im2col_panel(s_, in_, j0, nr, kGemmNR, dst);
  }

 private:
  const Conv2dShape& s_;
  const float* in_;
};

// The same panels copied from the group's phase planes (detail::Im2colPhases, built before the GEMM).
class PhasePanelPacker final : public BPanelPacker {
 public:
  PhasePanelPacker(const Conv2dShape& s, const float* planes) : s_(s), planes_(planes) {}
  void pack_panel(int64_t j0, int nr, float* dst) const override {
    detail::Im2colPhases::pack(s_, planes_, j0, nr, kGemmNR, dst);
  }

 private:
  const Conv2dShape& s_;
  const float* planes_;
};

// Builds the phase planes of one group's input (channels split over the pool) into this thread's scratch.
const float* build_phases(const Conv2dShape& s, const float* in_group, ThreadPool* pool) {
  static thread_local AlignedBuffer buf;
  float* planes = buf.ensure(detail::Im2colPhases::buffer_floats(s));
  parallel_for(pool, s.in_per_group(), [&](int64_t c0, int64_t c1) {
    detail::Im2colPhases::build(s, in_group, c0, c1, planes);
  });
  return planes;
}

int64_t group_k(const Conv2dShape& s) { return s.in_per_group() * s.kernel_h * s.kernel_w; }

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
  const bool phases = detail::Im2colPhases::applicable(s);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t g = 0; g < s.groups; ++g) {
      const float* in_g = in + (n * s.in_channels + g * s.in_per_group()) * in_plane;
      const int64_t out_off = (n * s.out_channels + g * m) * hw_out;
      const Epilogue e = slice_epilogue(ep, g * m, out_off);
      if (phases && s.kernel_h == 1 && s.kernel_w == 1) {
        // 1x1 with a stride: the subsampled input is B itself.
        const float* b = detail::Im2colPhases::col(build_phases(s, in_g, pool));
        sgemm_packed_a(m, hw_out, k, 1.0f, packed + g * packed_a_size(m, k), false, b, hw_out, 0.0f, out + out_off,
                       hw_out, e, pool);
        continue;
      }
      // Only with one thread (ResNet-50's 3x3/2 on 56x56: 2.90 -> 2.51 ms, Zen 5, AVX2): with several, the
      // GEMM's column blocks read every channel's planes, half of them built by the other core, and the same
      // conv took 1.82 against 1.70 ms at 2 threads.
      if (phases && thread_count(pool) == 1) {
        PhasePanelPacker packer(s, build_phases(s, in_g, pool));
        sgemm_packed_a_custom_b(m, hw_out, k, 1.0f, packed + g * packed_a_size(m, k), packer, 0.0f, out + out_off,
                                hw_out, e, pool);
        continue;
      }
      Im2colPanelPacker packer(s, in_g);
      sgemm_packed_a_custom_b(m, hw_out, k, 1.0f, packed + g * packed_a_size(m, k), packer, 0.0f, out + out_off,
                              hw_out, e, pool);
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

void conv2d_nchw_1x1_gemm_strided(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                  int64_t out_plane_stride, const Epilogue& ep, ThreadPool* pool) {
  const int64_t m = s.out_channels, k = s.in_channels, hw = s.in_h * s.in_w;
  Epilogue e = slice_epilogue(ep, 0, 0);
  if (e.residual) e.residual_ld = hw;  // the residual stays dense
  sgemm_packed_a(m, hw, k, 1.0f, packed, false, in, hw, 0.0f, out, out_plane_stride, e, pool);
}

bool conv2d_nchw_1x1_gemv_applicable(const Conv2dShape& s) {
  return s.is_pointwise() && s.groups == 1 && s.in_h == 1 && s.in_w == 1;
}

size_t conv2d_nchw_1x1_gemv_packed_size(const Conv2dShape& s) { return packed_b_size(s.out_channels, s.in_channels); }

void conv2d_nchw_1x1_gemv_pack(const Conv2dShape& s, const float* weights, float* packed) {
  pack_b(true, s.out_channels, s.in_channels, weights, s.in_channels, packed);  // op(B) = W^T, Cin x Cout
}

void conv2d_nchw_1x1_gemv(const Conv2dShape& s, const float* in, const float* packed, float* out,
                          const Epilogue& ep, ThreadPool* pool) {
  const int64_t K = s.in_channels, M = s.out_channels;
  // Below 64k multiply-adds (a few microseconds) handing half the panels to the other thread costs more than it saves.
  ThreadPool* p = M * K >= (int64_t{1} << 16) ? pool : nullptr;
  for (int64_t n = 0; n < s.batch; ++n) {
    Epilogue e = ep;
    e.bias_per_column = true;  // output channel = GEMV column
    if (e.residual) e.residual += n * M;
    sgemm_packed_b(false, 1, M, K, 1.0f, in + n * K, K, packed, 0.0f, out + n * M, M, e, p);
  }
}

bool conv2d_nchw_gemm_pixel_rows_applicable(const Conv2dShape& s) { return s.groups == 1; }

size_t conv2d_nchw_gemm_pixel_rows_packed_size(const Conv2dShape& s) {
  return packed_b_size(s.out_channels, group_k(s));
}

void conv2d_nchw_gemm_pixel_rows_pack(const Conv2dShape& s, const float* weights, float* packed) {
  pack_b(true, s.out_channels, group_k(s), weights, group_k(s), packed);  // op(B) = W^T, K x Cout
}

void conv2d_nchw_gemm_pixel_rows(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                 const Epilogue& ep, ThreadPool* pool) {
  const int64_t K = group_k(s), P = s.out_h() * s.out_w(), M = s.out_channels;
  const int64_t in_image = s.in_channels * s.in_h * s.in_w, panels = (P + kGemmMR - 1) / kGemmMR;
  static thread_local AlignedBuffer a_buf, c_buf;
  float* a = a_buf.ensure(packed_a_size(P, K));
  float* c = c_buf.ensure(static_cast<size_t>(P * M));
  const bool phases = detail::Im2colPhases::applicable(s);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* in_n = in + n * in_image;
    const float* planes = phases ? build_phases(s, in_n, pool) : nullptr;
    parallel_for(pool, panels, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int nr = static_cast<int>(std::min<int64_t>(kGemmMR, P - p * kGemmMR));
        if (phases)
          detail::Im2colPhases::pack(s, planes, p * kGemmMR, nr, kGemmMR, a + p * kGemmMR * K);
        else
          detail::pack_im2col_panel(s, in_n, p * kGemmMR, nr, kGemmMR, a + p * kGemmMR * K);
      }
    });
    sgemm_packed_ab(P, M, K, 1.0f, a, packed, 0.0f, c, M, Epilogue{}, pool);
    float* out_n = out + n * M * P;
    Epilogue e = ep;
    if (e.residual) e.residual += n * M * P;
    parallel_for(pool, M, [&](int64_t c0, int64_t c1) {
      // 16 channels at a time: each pixel's 16 values are one contiguous read, written to 16 rows that
      // each advance by one (reading c down a column, M floats apart, took a tenth of the kernel's time).
      for (int64_t cb = c0; cb < c1; cb += 16) {
        const int64_t ce = std::min(c1, cb + 16);
        for (int64_t p = 0; p < P; ++p) {
          const float* src = c + p * M;
          for (int64_t ch = cb; ch < ce; ++ch) out_n[ch * P + p] = src[ch];
        }
      }
      Epilogue part = e;
      if (part.bias) part.bias += c0;
      if (part.residual) part.residual += c0 * P;
      apply_epilogue_planar(out_n + c0 * P, c1 - c0, P, part);
    });
  }
}

}  // namespace tessel::rt
