// Arena planning for the cpu target: liveness per storage root, in-place reuse, first-fit offsets.
#include <algorithm>

#include "plan.h"
#include "tessel/support/error.h"

namespace tessel::cpu {
namespace {

/// firstStep/lastStep of every root from the steps' reads and writes (graph outputs live to the end).
void computeLiveness(Plan& plan) {
  for (PlanTensor& t : plan.tensors) t.firstStep = t.lastStep = -1;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    auto touch = [&](int id) {
      PlanTensor& r = plan.tensors[rootOf(plan, id)];
      if (r.firstStep < 0) r.firstStep = static_cast<int>(i);
      r.lastStep = std::max(r.lastStep, static_cast<int>(i));
    };
    for (int id : plan.steps[i].writes) touch(id);
    for (int id : plan.steps[i].reads) touch(id);
  }
}

/// Lets an element-wise step write over an operand that dies at that step.
void applyInPlace(Plan& plan) {
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    if (s.inplaceCandidate < 0 || s.writes.size() != 1) continue;
    int w = s.writes[0];
    PlanTensor& out = plan.tensors[w];
    if (out.kind != StorageKind::Arena || out.aliasOf >= 0) continue;
    if (offsetInRoot(plan, s.inplaceCandidate) != 0) continue;  // a Concat slice, not a whole tensor
    int rc = rootOf(plan, s.inplaceCandidate);
    PlanTensor& in = plan.tensors[rc];
    if (in.kind != StorageKind::Arena || in.lastStep != static_cast<int>(i) || in.numel != out.numel ||
        in.dtype != out.dtype)
      continue;
    out.aliasOf = rc;
    in.lastStep = std::max(in.lastStep, out.lastStep);
  }
}

}  // namespace

void planMemory(Plan& plan) {
  computeLiveness(plan);
  applyInPlace(plan);
  computeLiveness(plan);
  struct Block {
    int64_t offset, size;
    int first, last;
  };
  std::vector<int> roots;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor& t = plan.tensors[i];
    if (t.kind == StorageKind::Arena && t.aliasOf < 0 && t.firstStep >= 0) roots.push_back(static_cast<int>(i));
  }
  std::stable_sort(roots.begin(), roots.end(),
                   [&](int a, int b) { return plan.tensors[a].firstStep < plan.tensors[b].firstStep; });
  std::vector<Block> placed;
  int64_t naive = 0;
  for (int id : roots) {
    PlanTensor& t = plan.tensors[id];
    int64_t size = (t.storageFloats() + 15) / 16 * 16;  // 64-byte aligned blocks
    naive += size;
    std::vector<Block> overlapping;
    for (const Block& b : placed)
      if (b.first <= t.lastStep && t.firstStep <= b.last) overlapping.push_back(b);
    std::sort(overlapping.begin(), overlapping.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
    int64_t offset = 0;
    for (const Block& b : overlapping) {
      if (b.offset >= offset + size) break;  // the gap before b fits
      offset = std::max(offset, b.offset + b.size);
    }
    t.offset = offset;
    placed.push_back({offset, size, t.firstStep, t.lastStep});
    plan.arenaFloats = std::max(plan.arenaFloats, offset + size);
  }
  plan.report.arenaBytes = static_cast<size_t>(plan.arenaFloats) * sizeof(float);
  plan.report.naiveArenaBytes = static_cast<size_t>(naive) * sizeof(float);
}

}  // namespace tessel::cpu
