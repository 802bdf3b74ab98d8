// NPU operator interpreter of Transpose (any permutation, any rank) by DMA (copyBox): the output is written in its
// storage order (rank 4 channels-last, other ranks row-major) in tiles of rows of its contiguous axis; each tile is
// one strided load (rows read with the input's strides of the permuted axes: whole rows of vec_len words when the
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
  return checkCopySize(n.input(0)->type.staticShape());
}

void lowerTranspose(const Node& n, LowerContext& ctx) {
  ctx.allocate(n.output(0));
  const TensorLoc x = ctx.loc(n.input(0)), y = ctx.loc(n.output(0));
  const std::vector<int64_t> perm = permutation(n), inStride = storageStrides(x);
  CopyBox box;
  box.size = y.shape, box.dst = storageStrides(y), box.srcAddr = x.addr, box.dstAddr = y.addr;
  for (int64_t p : perm) box.src.push_back(inStride[static_cast<size_t>(p)]);
  copyBox(ctx, n, box, 0);
}

const RegisterOpLowering kTranspose({"Transpose"}, {OpFamily::Alias, checkTranspose, lowerTranspose});

}  // namespace
}  // namespace tessel::npu::lower
