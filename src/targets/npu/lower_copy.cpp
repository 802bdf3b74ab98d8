// Copies between DRAM tensors by DMA, shared by the data-movement operators that are not views: Transpose, a
// Reshape that changes the NPU's layout, Concat / Split / Slice / Gather along an axis other than the channels. A
// copy is a box of elements with, per axis, the words between consecutive indices in the source and in the
// destination; it is lowered in tiles of rows of the destination's contiguous axis, each tile one strided load into
// `inp` and one store.
#include <algorithm>
#include <fmt/format.h>

#include "lower_context.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {

std::vector<int64_t> storageStrides(const TensorLoc& l) {
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

hw::SupportResult checkCopySize(const Shape& s) {
  if (shapeSize(s) >= kMaxCopyElements)
    return refuse(fmt::format("a copy of {} elements (2^24 or more: the DMA's inner stride field holds 24 bits)",
                              shapeSize(s)));
  return ok();
}

std::vector<int64_t> denseStrides(const Shape& s) {
  TensorLoc l;
  l.shape = s, l.channelsLast = s.size() == 4;
  return storageStrides(l);
}

std::optional<CopyBox> reshapeBox(const Shape& x, const std::vector<int64_t>& xs, const Shape& y,
                                  const std::vector<int64_t>& ys) {
  if (shapeSize(x) != shapeSize(y)) return std::nullopt;
  CopyBox box;  // built innermost first, reversed at the end
  // Walk both shapes from their last axis, cutting each into the common refinement of the two (a part of an axis
  // steps by the axis' stride times the parts already taken inside it).
  auto i = static_cast<int64_t>(x.size()) - 1, j = static_cast<int64_t>(y.size()) - 1;
  int64_t restX = 0, restY = 0, innerX = 1, innerY = 1;
  auto nextX = [&] {
    while (i >= 0 && x[static_cast<size_t>(i)] == 1) --i;
    restX = i >= 0 ? x[static_cast<size_t>(i)] : 0, innerX = 1;
  };
  auto nextY = [&] {
    while (j >= 0 && y[static_cast<size_t>(j)] == 1) --j;
    restY = j >= 0 ? y[static_cast<size_t>(j)] : 0, innerY = 1;
  };
  nextX(), nextY();
  while (i >= 0 && j >= 0) {
    const int64_t part = std::min(restX, restY);
    if (restX % part != 0 || restY % part != 0) return std::nullopt;  // no common refinement ([4, 6] -> [6, 4])
    box.size.push_back(part);
    box.src.push_back(xs[static_cast<size_t>(i)] * innerX);
    box.dst.push_back(ys[static_cast<size_t>(j)] * innerY);
    restX /= part, restY /= part, innerX *= part, innerY *= part;
    if (restX == 1) --i, nextX();
    if (restY == 1) --j, nextY();
  }
  if (i >= 0 || j >= 0) return std::nullopt;
  std::reverse(box.size.begin(), box.size.end());
  std::reverse(box.src.begin(), box.src.end());
  std::reverse(box.dst.begin(), box.dst.end());
  return box;
}

uint32_t copyBox(LowerContext& ctx, const Node& node, const CopyBox& box, uint32_t tile) {
  // The axes that move anything, in the destination's storage order (its contiguous axis last).
  std::vector<size_t> order;
  for (size_t a = 0; a < box.size.size(); ++a) {
    if (box.size[a] == 0) return tile;  // an empty box
    if (box.size[a] > 1) order.push_back(a);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return box.dst[a] > box.dst[b]; });
  // Neighbours that step through both tensors as one axis are one axis (longer rows, fewer instructions).
  std::vector<int64_t> size, src, dst;
  for (size_t a : order) {
    if (!size.empty() && src.back() == box.src[a] * box.size[a] && dst.back() == box.dst[a] * box.size[a]) {
      size.back() *= box.size[a], src.back() = box.src[a], dst.back() = box.dst[a];
      continue;
    }
    size.push_back(box.size[a]), src.push_back(box.src[a]), dst.push_back(box.dst[a]);
  }
  if (size.empty()) size = {1}, src = {1}, dst = {1};  // one element
  const size_t rank = size.size();
  const int64_t L = size[rank - 1], sSrcL = src[rank - 1], sDstL = dst[rank - 1];
  const int64_t M = rank >= 2 ? size[rank - 2] : 1, sSrcM = rank >= 2 ? src[rank - 2] : 0, sDstM = rank >= 2 ? dst[rank - 2] : 0;
  // Tiles of mk rows of lk words within the alias tiling's slot (half the smallest buffer).
  const NodeTiling& t = ctx.tiling(node);
  const int64_t slot = std::max<int64_t>(1, t.channels * t.cols);
  const int64_t lk = std::clamp<int64_t>(std::min(slot, kMaxInstructionCount), 1, L);
  const int64_t mk = std::clamp<int64_t>(std::min(slot / lk, kMaxInstructionCount), 1, M);
  const size_t outerAxes = rank >= 2 ? rank - 2 : 0;
  std::vector<int64_t> index(outerAxes, 0);
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  for (bool more = true; more;) {
    int64_t srcBase = 0, dstBase = 0;
    for (size_t a = 0; a < outerAxes; ++a) srcBase += index[a] * src[a], dstBase += index[a] * dst[a];
    for (int64_t m0 = 0; m0 < M; m0 += mk)
      for (int64_t l0 = 0; l0 < L; l0 += lk) {
        ctx.beginTile(node, tile++);
        const int64_t mm = std::min(mk, M - m0), ll = std::min(lk, L - l0);
        const int32_t r = ctx.region(Buffer::Input, u64(mm * ll));
        const uint64_t from = box.srcAddr + u64(srcBase + m0 * sSrcM + l0 * sSrcL);
        const uint64_t to = box.dstAddr + u64(dstBase + m0 * sDstM + l0 * sDstL);
        if (sSrcL == 1)  // whole rows
          ctx.emit(makeLoad(ctx.at(r, 0, u64(ll), 0), from, u64(sSrcM), 0, u32(mm), 1, u32(ll)), r);
        else  // one word per element: inner steps along the source's stride of the destination's contiguous axis
          ctx.emit(makeLoad(ctx.at(r, 0, u64(ll), 1), from, u64(sSrcM), u64(sSrcL), u32(mm), u32(ll), 1), r);
        if (sDstL == 1)
          ctx.emit(makeStore(ctx.at(r, 0, u64(ll), 0), to, u64(sDstM), 0, u32(mm), 1, u32(ll)), -1, r);
        else  // a destination whose smallest stride is not 1 (a slice of a wider tensor's other axis)
          ctx.emit(makeStore(ctx.at(r, 0, u64(ll), 1), to, u64(sDstM), u64(sDstL), u32(mm), u32(ll), 1), -1, r);
      }
    // Next index of the outer axes (the innermost of them fastest).
    more = false;
    for (size_t a = outerAxes; a-- > 0;) {
      if (++index[a] < size[a]) {
        more = true;
        break;
      }
      index[a] = 0;
    }
  }
  return tile;
}

}  // namespace tessel::npu::lower
