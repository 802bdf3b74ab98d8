// An inverted residual block (1x1 expansion -> depthwise K x K -> 1x1 projection, MobileNetV2's and MnasNet's
// block) computed in bands of output rows, each band by one thread from the input rows it needs, so that no tensor
// of the block is written whole or passed between cores (unfused at 2 threads, the GEMMs split pixels and the
// depthwise kernel channels, so the expanded tensor -- 6x the block's input, 1.8-4.8 MB on the 56x56 and 112x112
// maps -- crosses between the cores twice). Per band:
//   1. the input rows the band's depthwise window reads are expanded into a scratch of `cap` rows per channel
//      (rows outside the map are zeros: the depthwise's padding); the K - stride rows the same thread expanded for
//      the band before are moved to the top of the scratch, not recomputed;
//   2. the depthwise kernel runs on that scratch (a band-shaped Conv2dShape: cap input rows, no row padding,
//      band_rows output rows) into a second scratch;
//   3. a GEMM projects those rows into the output (and adds the residual); its C rows are the output planes.
// Bands go to the threads owner-first in contiguous runs (parallel_for). The bands are schedule data: at least
// ConvChain::min_bands, and bands_per_thread per thread with several threads (conv_chain_band_rows).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/gemm.h"

namespace tessel::rt {

namespace {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of the expansion scratch one band reads: (band_rows - 1) * stride + kernel height.
int64_t cap_rows(const Conv2dShape& d, int64_t band_rows) { return (band_rows - 1) * d.stride_h + d.kernel_h; }

}  // namespace

bool conv_chain_applicable(const ConvChain& c) {
  const Conv2dShape &x = c.expand, &d = c.depthwise, &p = c.project;
  return x.batch == 1 && d.batch == 1 && p.batch == 1 && x.groups == 1 && x.is_pointwise() && d.is_depthwise() &&
         d.in_channels == x.out_channels && d.in_h == x.in_h && d.in_w == x.in_w && d.kernel_h == d.kernel_w &&
         d.stride_h == d.stride_w && d.dilation_h == 1 && d.dilation_w == 1 && d.kernel_h >= d.stride_h &&
         d.pad_top < d.kernel_h && d.pad_bottom < d.kernel_h && p.groups == 1 && p.is_pointwise() &&
         p.in_channels == d.out_channels && p.in_h == d.out_h() && p.in_w == d.out_w() && c.min_bands >= 1;
}

int64_t conv_chain_band_rows(const ConvChain& c, int threads) {
  const int64_t per_thread = threads > 1 ? std::max<int64_t>(c.bands_per_thread, 1) * threads : 1;
  const int64_t bands = std::min(std::max(std::max<int64_t>(c.min_bands, 1), per_thread), c.depthwise.out_h());
  return ceil_div(c.depthwise.out_h(), bands);
}

void conv_chain_nchw(const ConvChain& c, const float* in, const float* packed_expand, const float* dw_weights,
                     const float* packed_project, float* out, const Epilogue& ep_expand, const Epilogue& ep_dw,
                     const Epilogue& ep_project, ThreadPool* pool) {
  const Conv2dShape &d = c.depthwise, &p = c.project;
  const int64_t C = c.expand.in_channels, E = d.in_channels, P = p.out_channels;
  const int64_t H = d.in_h, W = d.in_w, OH = d.out_h(), OW = d.out_w(), K = d.kernel_h, S = d.stride_h;
  const int64_t B = conv_chain_band_rows(c, thread_count(pool)), cap = cap_rows(d, B), bands = ceil_div(OH, B);
  // The depthwise of one band: cap padded rows in, B rows out (the last band computes rows past OH that the
  // projection does not read).
  Conv2dShape band = d;
  band.in_h = cap;
  band.pad_top = band.pad_bottom = 0;
  const Epilogue e_expand = slice_epilogue(ep_expand, 0, 0), e_dw = slice_epilogue(ep_dw, 0, 0);
  // A thread's chunks of its own part come in order: the next one starts where its last one ended, and keeps
  // that band's last rows (the state below, valid for this call only).
  static std::atomic<uint64_t> calls{0};
  const uint64_t call = calls.fetch_add(1, std::memory_order_relaxed) + 1;
  parallel_for(pool, bands, [&](int64_t b0, int64_t b1) {
    static thread_local AlignedBuffer ex_buf, dw_buf;
    static thread_local struct {
      uint64_t call = 0;
      int64_t next_band = -1, prev_lo = 0;
    } last;
    float* ex = ex_buf.ensure(static_cast<size_t>(E * cap * W));
    float* dw = dw_buf.ensure(static_cast<size_t>(E * B * OW));
    const int64_t plane = cap * W;
    bool have = last.call == call && last.next_band == b0;
    int64_t prev_lo = last.prev_lo;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t y0 = b * B, y1 = std::min(OH, y0 + B);
      // Padded-input rows [lo, lo + cap) land in scratch rows [0, cap); the band's outputs read up to `hi`.
      const int64_t lo = y0 * S - d.pad_top, hi = (y1 - 1) * S - d.pad_top + K - 1;
      int64_t keep = 0;  // scratch rows already holding rows lo.. (the previous band's last K - S rows)
      if (have) {
        const int64_t shift = lo - prev_lo;
        keep = std::max<int64_t>(0, cap - shift);
        if (keep > 0)
          for (int64_t e = 0; e < E; ++e)
            std::memmove(ex + e * plane, ex + e * plane + shift * W, static_cast<size_t>(keep * W) * sizeof(float));
      }
      // Rows [lo + keep, lo + cap): the real ones [r0, r1] expanded, the others zero.
      const int64_t r0 = std::max(lo + keep, int64_t{0}), r1 = std::min(hi, H - 1);
      auto zero_rows = [&](int64_t from, int64_t to) {  // scratch rows [from, to)
        if (to <= from) return;
        for (int64_t e = 0; e < E; ++e)
          std::memset(ex + e * plane + from * W, 0, static_cast<size_t>((to - from) * W) * sizeof(float));
      };
      if (r1 >= r0) {
        zero_rows(keep, r0 - lo);
        sgemm_packed_a(E, (r1 - r0 + 1) * W, C, 1.0f, packed_expand, false, in + r0 * W, H * W, 0.0f,
                       ex + (r0 - lo) * W, plane, e_expand, nullptr);
        zero_rows(r1 + 1 - lo, cap);
      } else {
        zero_rows(keep, cap);
      }
      prev_lo = lo;
      have = true;
      conv2d_nchw_depthwise_avx2(band, ex, dw_weights, dw, e_dw, nullptr);
      sgemm_packed_a(P, (y1 - y0) * OW, E, 1.0f, packed_project, false, dw, B * OW, 0.0f, out + y0 * OW, OH * OW,
                     slice_epilogue(ep_project, 0, y0 * OW), nullptr);
    }
    last.call = call;
    last.next_band = b1;
    last.prev_lo = prev_lo;
  });
}

}  // namespace tessel::rt
