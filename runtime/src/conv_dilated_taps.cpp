// Atrous convolution as one GEMM per kernel tap over the outputs that tap reads the map for (groups == 1,
// stride 1, dilation > 1). A tap (kh, kw) of dilation d reads input (oh - pad_top + kh d, ow - pad_left + kw d):
// inside the map only on a rectangle of outputs, and everywhere else it multiplies padding. DeepLabV3's ASPP
// on a 33x33 map (520x520 input, output stride 16) has rates 12 and 24: 43 % and 73 % of im2col's products
// are such zeros. Here tap t computes C_t[Cout x R_t] = W_t[Cout x Cin] * X_t[Cin x R_t] over its rectangle R_t
// alone (X_t copied from the input rows, W_t packed per tap) and adds it into the output: straight from the
// GEMM for a tap that covers the whole output (the centre one), else through a scratch tile. Bias, residual and
// activation go on at the end (apply_epilogue_planar).
#include <algorithm>
#include <cstring>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue.h"
#include "tessel/rt/gemm.h"

namespace tessel::rt {
namespace {

// The outputs [o0, o1) of one axis whose input o - pad + k * dilation (stride 1) is inside [0, in).
struct Span {
  int64_t o0, o1;
};
Span live_span(int64_t in, int64_t out, int64_t pad, int64_t k, int64_t dilation) {
  const int64_t shift = k * dilation - pad;  // input = output + shift
  return {std::clamp<int64_t>(-shift, 0, out), std::clamp<int64_t>(in - shift, 0, out)};
}

int64_t taps(const Conv2dShape& s) { return s.kernel_h * s.kernel_w; }
size_t tap_floats(const Conv2dShape& s) { return packed_a_size(s.out_channels, s.in_channels); }

}  // namespace

// Products that read the map, over all of im2col's (the live share of the work).
double conv2d_live_tap_share(const Conv2dShape& s) {
  int64_t rows = 0, cols = 0;
  for (int64_t k = 0; k < s.kernel_h; ++k) {
    const Span r = live_span(s.in_h, s.out_h(), s.pad_top, k, s.dilation_h);
    rows += r.o1 - r.o0;
  }
  for (int64_t k = 0; k < s.kernel_w; ++k) {
    const Span c = live_span(s.in_w, s.out_w(), s.pad_left, k, s.dilation_w);
    cols += c.o1 - c.o0;
  }
  return double(rows) * double(cols) / (double(s.kernel_h * s.out_h()) * double(s.kernel_w * s.out_w()));
}

namespace {

// At most this share of live products, the per-tap GEMMs pay off at any channel count.
constexpr double kMaxLiveShare = 0.8;
// Per-tap GEMMs of this many input channels or more run closer to the GEMM's peak than im2col's one GEMM
// with its implicit dilated im2col panels, even with no tap in padding: FCN-ResNet50's d = 2 and 4 3x3 convs
// (256-512 channels on 65x65) 614 -> 511-538 ms in all (Zen 5, 1 thread).
constexpr int64_t kMinChannels = 128;

}  // namespace

bool conv2d_mostly_dead_taps(const Conv2dShape& s) {
  return s.out_h() > 0 && s.out_w() > 0 && conv2d_live_tap_share(s) <= kMaxLiveShare;
}

bool conv2d_nchw_dilated_taps_applicable(const Conv2dShape& s) {
  // Worth it where a fifth of the products or more would multiply padding, or the taps' GEMMs are long;
  // elsewhere im2col's single GEMM (or the pixel tiles) does the same work in one pass.
  return s.groups == 1 && s.stride_h == 1 && s.stride_w == 1 && (s.dilation_h > 1 || s.dilation_w > 1) &&
         s.out_h() > 0 && s.out_w() > 0 && (conv2d_mostly_dead_taps(s) || s.in_channels >= kMinChannels);
}

size_t conv2d_nchw_dilated_taps_packed_size(const Conv2dShape& s) { return static_cast<size_t>(taps(s)) * tap_floats(s); }

void conv2d_nchw_dilated_taps_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t M = s.out_channels, C = s.in_channels, T = taps(s);
  AlignedBuffer tap(static_cast<size_t>(M * C));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c) tap.data()[m * C + c] = weights[(m * C + c) * T + t];
    pack_a(false, M, C, tap.data(), C, packed + t * tap_floats(s));
  }
}

void conv2d_nchw_dilated_taps(const Conv2dShape& s, const float* in, const float* packed, float* out,
                              const Epilogue& ep, ThreadPool* pool) {
  const int64_t M = s.out_channels, C = s.in_channels, H = s.in_h, W = s.in_w, OH = s.out_h(), OW = s.out_w();
  const int64_t plane = OH * OW;
  static thread_local AlignedBuffer b_buf, c_buf;
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* x = in + n * C * H * W;
    float* y = out + n * M * plane;
    // Whole-output taps first (the first one writes, the rest accumulate), then the partial ones.
    bool written = false;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t kh = 0; kh < s.kernel_h; ++kh)
        for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
          const Span r = live_span(H, OH, s.pad_top, kh, s.dilation_h), c = live_span(W, OW, s.pad_left, kw, s.dilation_w);
          const int64_t rh = r.o1 - r.o0, rw = c.o1 - c.o0;
          const bool whole = rh == OH && rw == OW;
          if (rh <= 0 || rw <= 0 || whole != (pass == 0)) continue;
          const float* a = packed + (kh * s.kernel_w + kw) * tap_floats(s);
          const int64_t ih0 = r.o0 + kh * s.dilation_h - s.pad_top, iw0 = c.o0 + kw * s.dilation_w - s.pad_left;
          if (whole && ih0 == 0 && iw0 == 0 && OW == W) {  // the tap reads the input as it is
            sgemm_packed_a(M, plane, C, 1.0f, a, false, x, H * W, written ? 1.0f : 0.0f, y, plane, {}, pool);
            written = true;
            continue;
          }
          // X_t: the rectangle of every input channel, rows of rw. A partial tap goes through a scratch tile and
          // a second pass: accumulating straight into the output rows (the rectangle copied at the output's width
          // with zeros around it, ldc = plane) was slower, FCN-ResNet50's atrous convs 511-538 -> 622-657 ms.
          const int64_t pixels = rh * rw;
          float* b = b_buf.ensure(static_cast<size_t>(C * pixels));
          parallel_for(pool, C, [&](int64_t c0, int64_t c1) {
            for (int64_t ch = c0; ch < c1; ++ch)
              for (int64_t i = 0; i < rh; ++i)
                std::memcpy(b + ch * pixels + i * rw, x + (ch * H + ih0 + i) * W + iw0,
                            static_cast<size_t>(rw) * sizeof(float));
          });
          if (whole) {  // the output's rows as they are (rw == OW)
            sgemm_packed_a(M, pixels, C, 1.0f, a, false, b, pixels, written ? 1.0f : 0.0f, y, plane, {}, pool);
            written = true;
            continue;
          }
          if (!written) std::fill(y, y + M * plane, 0.0f);
          written = true;
          float* t = c_buf.ensure(static_cast<size_t>(M * pixels));
          sgemm_packed_a(M, pixels, C, 1.0f, a, false, b, pixels, 0.0f, t, pixels, {}, pool);
          parallel_for(pool, M, [&](int64_t m0, int64_t m1) {
            for (int64_t m = m0; m < m1; ++m)
              for (int64_t i = 0; i < rh; ++i) {
                float* dst = y + m * plane + (r.o0 + i) * OW + c.o0;
                const float* src = t + m * pixels + i * rw;
                for (int64_t j = 0; j < rw; ++j) dst[j] += src[j];
              }
          });
        }
    if (!written) std::fill(y, y + M * plane, 0.0f);
    Epilogue e = ep;
    if (e.residual) e.residual += n * M * plane;
    apply_epilogue_planar(y, M, plane, e);
  }
}

}  // namespace tessel::rt
