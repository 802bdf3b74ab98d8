// NPU operator interpreter of Transpose (any permutation, any rank) by DMA: the output is written in its storage
// order (rank 4 channels-last, other ranks row-major) in tiles of rows of its contiguous axis; each tile is one
// strided load (rows read with the input's strides of the permuted axes: whole rows of vec_len words when the
// output's contiguous axis is the input's too, as in a transformer's head split [T, H, D] -> [H, T, D]; otherwise
// one word per element, which the DMA model prices per burst) and one dense store. Pass transpose-to-reshape has
// already turned the Transposes that move only axes of size 1 into views.
#include <algorithm>
#include <fmt/format.h>
#include <numeric>

#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

std::vector<int64_t> permutation(const Node& n) {
  const size_t rank = n.input(0)->type.staticShape().size();
  if (n.hasAttr("perm")) return n.attrInts("perm");
  std::vector<int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), 0);  // the default reverses the axes
  return perm;
}

hw::SupportResult checkTranspose(const Node& n) {
  const std::vector<int64_t> perm = permutation(n);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != static_cast<int64_t>(i)) return refuse("Transpose with an invalid perm");
  for (int64_t d : n.output(0)->type.staticShape())
    if (d > kMaxInstructionCount)
      return refuse(fmt::format("Transpose of an axis longer than {}", kMaxInstructionCount));
  // A word-by-word load steps by an input stride, which the encoding holds in 24 bits.
  if (shapeSize(n.input(0)->type.staticShape()) >= (int64_t{1} << 24))
    return refuse("Transpose of 2^24 elements or more (the DMA's inner stride field holds 24 bits)");
  return ok();
}

/// Words between consecutive indices of each logical axis of a tensor as the NPU stores it.
std::vector<int64_t> strides(const TensorLoc& l) {
  const Shape& s = l.shape;
  const int64_t ps = l.pixelStride();
  std::vector<int64_t> st(s.size(), 1);
  if (s.empty()) return st;
  if (l.channelsLast && s.size() == 4) {  // N, H, W pixels of C channels
    st[1] = 1, st[3] = ps, st[2] = s[3] * ps, st[0] = s[2] * s[3] * ps;
    return st;
  }
  if (s.size() >= 2) st[s.size() - 2] = ps;
  for (size_t k = s.size() - 2; s.size() >= 3 && k-- > 0;) st[k] = st[k + 1] * s[k + 1];
  return st;
}

/// The logical axes of a tensor in storage order, the contiguous one last.
std::vector<size_t> storageOrder(const TensorLoc& l) {
  if (l.channelsLast && l.shape.size() == 4) return {0, 2, 3, 1};
  std::vector<size_t> q(l.shape.size());
  std::iota(q.begin(), q.end(), 0);
  return q;
}

void lowerTranspose(const Node& n, LowerContext& ctx) {
  const NodeTiling& t = ctx.tiling(n);
  ctx.allocate(n.output(0));
  const TensorLoc x = ctx.loc(n.input(0)), y = ctx.loc(n.output(0));
  const std::vector<int64_t> perm = permutation(n), inStride = strides(x), outStride = strides(y);
  const Shape& out = y.shape;
  if (out.empty() || shapeSize(out) == 0) return;
  std::vector<size_t> q = storageOrder(y);
  // Rank 1 (or 0): a single row.
  const size_t last = q.back();
  const int64_t L = out[last], sInLast = inStride[static_cast<size_t>(perm[last])];
  const bool rows = q.size() >= 2;
  const size_t second = rows ? q[q.size() - 2] : last;
  const int64_t M = rows ? out[second] : 1;
  const int64_t sInRow = rows ? inStride[static_cast<size_t>(perm[second])] : 0, sOutRow = rows ? outStride[second] : 0;
  // Tiles of mk rows of lk words within the alias tiling's slot (half the smallest buffer).
  const int64_t slot = std::max<int64_t>(1, t.channels * t.cols);
  const int64_t lk = std::clamp<int64_t>(slot, 1, L), mk = std::clamp<int64_t>(slot / lk, 1, M);
  // The other axes (storage order, outermost first) as an odometer of base offsets.
  const std::vector<size_t> outerAxes(q.begin(), q.end() - (rows ? 2 : 1));
  std::vector<int64_t> index(outerAxes.size(), 0);
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  uint32_t tile = 0;
  for (bool more = true; more;) {
    int64_t inBase = 0, outBase = 0;
    for (size_t a = 0; a < outerAxes.size(); ++a) {
      inBase += index[a] * inStride[static_cast<size_t>(perm[outerAxes[a]])];
      outBase += index[a] * outStride[outerAxes[a]];
    }
    for (int64_t m0 = 0; m0 < M; m0 += mk)
      for (int64_t l0 = 0; l0 < L; l0 += lk) {
        ctx.beginTile(n, tile++);
        const int64_t mm = std::min(mk, M - m0), ll = std::min(lk, L - l0);
        const int32_t r = ctx.region(Buffer::Input, static_cast<uint64_t>(mm * ll));
        const uint64_t from = x.addr + static_cast<uint64_t>(inBase + m0 * sInRow + l0 * sInLast);
        if (sInLast == 1)  // whole rows
          ctx.emit(makeLoad(ctx.at(r, 0, static_cast<uint64_t>(ll), 0), from, static_cast<uint64_t>(sInRow), 0, u32(mm), 1,
                            u32(ll)),
                   r);
        else  // one word per element: inner steps along the input's stride of the output's contiguous axis
          ctx.emit(makeLoad(ctx.at(r, 0, static_cast<uint64_t>(ll), 1), from, static_cast<uint64_t>(sInRow),
                            static_cast<uint64_t>(sInLast), u32(mm), u32(ll), 1),
                   r);
        ctx.emit(makeStore(ctx.at(r, 0, static_cast<uint64_t>(ll), 0),
                           y.addr + static_cast<uint64_t>(outBase + m0 * sOutRow + l0), static_cast<uint64_t>(sOutRow), 0,
                           u32(mm), 1, u32(ll)),
                 -1, r);
      }
    // Next index of the outer axes (the innermost of them fastest).
    more = false;
    for (size_t a = outerAxes.size(); a-- > 0;) {
      if (++index[a] < out[outerAxes[a]]) {
        more = true;
        break;
      }
      index[a] = 0;
    }
  }
}

const RegisterOpLowering kTranspose({"Transpose"}, {OpFamily::Alias, checkTranspose, lowerTranspose});

}  // namespace
}  // namespace tessel::npu::lower
