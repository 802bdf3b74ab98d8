// Lowering of 2-D pooling (MaxPool, AveragePool, GlobalAveragePool) to the runtime's NCHW and NCHWc8 kernels,
// and of every other pooling (1-D, 3-D, dilations, Indices, integers, LpPool, GlobalMaxPool) to rt::pool_nd.
#include <fmt/format.h>

#include "kernel_rules.h"
#include "lowerer.h"
#include "tessel/ops/pool_geometry.h"
#include "tessel/rt/pool.h"

namespace tessel::cpu {

/// The runtime geometry of a MaxPool/AveragePool node on an NCHW input of shape xs, or nullopt when the
/// compiled kernels do not cover it (not 2-D, dilations, the Indices output, storage_order 1).
std::optional<rt::Pool2dShape> loweredPoolShape(const Node* n, const Shape& xs) {
  auto k = n->attrInts("kernel_shape");
  auto st = n->hasAttr("strides") ? n->attrInts("strides") : std::vector<int64_t>{};
  auto pads = n->hasAttr("pads") ? n->attrInts("pads") : std::vector<int64_t>{};
  auto dil = n->hasAttr("dilations") ? n->attrInts("dilations") : std::vector<int64_t>{};
  std::string autoPad = n->hasAttr("auto_pad") ? n->attrString("auto_pad") : "NOTSET";
  bool dilated = false;
  for (int64_t d : dil) dilated = dilated || d != 1;
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (xs.size() != 4 || k.size() != 2 || dilated || (autoPad != "NOTSET" && autoPad != "VALID" && !same) ||
      n->numOutputs() > 1 || (n->hasAttr("storage_order") && n->attrInt("storage_order") != 0))
    return std::nullopt;
  if (st.size() != 2) st = {1, 1};
  if (pads.size() != 4 || autoPad != "NOTSET") pads = {0, 0, 0, 0};
  bool ceil = n->hasAttr("ceil_mode") && n->attrInt("ceil_mode") != 0;
  if (same) {  // out = ceil(in / stride); the odd pad goes at the end (UPPER) or the start (LOWER)
    for (int axis = 0; axis < 2; ++axis) {
      int64_t in = xs[2 + axis], out = (in + st[axis] - 1) / st[axis];
      int64_t total = std::max<int64_t>(0, (out - 1) * st[axis] + k[axis] - in);
      int64_t lo = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[axis] = lo, pads[axis + 2] = total - lo;
    }
    ceil = false;
  }
  rt::Pool2dShape p;
  p.batch = xs[0], p.channels = xs[1], p.in_h = xs[2], p.in_w = xs[3];
  p.kernel_h = k[0], p.kernel_w = k[1], p.stride_h = st[0], p.stride_w = st[1];
  p.pad_top = pads[0], p.pad_left = pads[1], p.pad_bottom = pads[2], p.pad_right = pads[3];
  p.ceil_mode = ceil;
  p.count_include_pad = isOp(*n, "AveragePool") && n->attrInt("count_include_pad") != 0;
  return p;
}

std::string poolShapeInit(const rt::Pool2dShape& p) {
  return fmt::format("{{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}}", p.batch, p.channels, p.in_h,
                     p.in_w, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.pad_bottom,
                     p.pad_right, p.ceil_mode, p.count_include_pad);
}

bool Lowerer::lowerPool(const Node* n) {
  const std::string& op = n->opType();
  int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  const Shape& xs = plan_.tensors[x].shape;
  std::string comment = fmt::format("{} '{}' -> {}", op, n->name(), shapeToString(plan_.tensors[y].shape));
  if (xs.size() != 4) return false;  // 1-D and 3-D pooling
  if (isOp(*n, "GlobalAveragePool") && runsBlocked(*n)) {  // [N, C, 1, 1] blocked is [N, C, 1, 1] (C % 8 == 0)
    addStep({n->name(), op, "global_avgpool_nchwc8"}, comment,
            fmt::format("rt::global_avgpool_nchwc8({}, {}, {}, {}, {}, pool);", xs[0], xs[1], xs[2] * xs[3], ref(x),
                        ref(y)),
            {x}, {y});
    return true;
  }
  if (isOp(*n, "GlobalAveragePool")) {
    addStep({n->name(), op, "global_avgpool_nchw"}, comment, fmt::format("rt::global_avgpool_nchw({}, {}, {}, {}, {}, pool);", xs[0], xs[1], xs[2] * xs[3],
                                 ref(x), ref(y)),
            {x}, {y});
    return true;
  }
  auto ps = loweredPoolShape(n, xs);
  if (!ps) return false;  // dilation, the Indices output
  int id = shapeCounter_++;
  plan_.globals += fmt::format("static const rt::Pool2dShape kPool{} = {};\n", id, poolShapeInit(*ps));
  if (runsBlocked(*n)) {  // select-layout blocks MaxPool only
    if (!isOp(*n, "MaxPool")) return false;
    addStep({n->name(), op, "maxpool2d_nchwc8"}, comment,
            fmt::format("rt::maxpool2d_nchwc8(kPool{}, {}, {}, pool);", id, ref(x), ref(y)), {x}, {y});
    return true;
  }
  const bool max = isOp(*n, "MaxPool");
  addStep({n->name(), op, max ? "maxpool2d_nchw" : "avgpool2d_nchw"}, comment,
          fmt::format("rt::{}pool2d_nchw(kPool{}, {}, {}, pool);", max ? "max" : "avg", id, ref(x),
                      ref(y)),
          {x}, {y});
  return true;
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerPoolNd(const Node* n) {
  const bool global = n->opType().rfind("Global", 0) == 0;
  const std::string kind = global ? n->opType().substr(6) : n->opType();
  if (!n->domain().empty() || (kind != "MaxPool" && kind != "AveragePool" && kind != "LpPool")) return false;
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype;
  const Shape xs = xv->type.staticShape();
  if (dt == DType::Float16 || dt == DType::BFloat16 || dt == DType::Bool || xs.size() < 3 || xs.size() > 5 ||
      (kind != "MaxPool" && !isFloat(dt)))
    return false;
  PoolWindow p;
  if (global) {
    p.planes = xs[0] * xs[1];
    for (size_t d = 2; d < xs.size(); ++d) p.in[d + 3 - xs.size()] = p.kernel[d + 3 - xs.size()] = xs[d];
  } else {
    p = poolWindow(*n, xs);
  }
  const int x = tensorOf(xv), y = tensorOf(n->output(0));
  std::vector<int> writes{y};
  std::string indices = "nullptr";
  if (n->numOutputs() > 1 && n->output(1)) {
    writes.push_back(tensorOf(n->output(1)));
    indices = ref(writes.back());
  }
  const int id = shapeCounter_++;
  auto list = [](const std::array<int64_t, 3>& v) { return fmt::format("{{{}, {}, {}}}", v[0], v[1], v[2]); };
  plan_.globals += fmt::format("static const rt::PoolNdShape kPoolNd{} = {{{}, {}, {}, {}, {}, {}, {}, {}}};\n", id,
                               p.planes, list(p.in), list(p.out), list(p.kernel), list(p.stride), list(p.dilation),
                               list(p.padBegin), list(p.padEnd));
  const char* type = cppElementType(dt);
  addStep({n->name(), n->opType(), "pool_nd"},
          fmt::format("{} '{}' {} -> {}", n->opType(), n->name(), shapeToString(xs),
                      shapeToString(n->output(0)->type.staticShape())),
          fmt::format("rt::pool_nd<{0}, {0}>(kPoolNd{1}, rt::PoolNdKind::{2}, {3}, {4}, {5}, {6}, {7}, {8});", type, id,
                      kind == "MaxPool" ? "Max" : kind == "LpPool" ? "Lp" : "Average", ref(x), ref(y), indices,
                      kind == "AveragePool" && !global && n->attrInt("count_include_pad") != 0,
                      kind == "LpPool" ? static_cast<double>(n->attrInt("p")) : 1.0,
                      kind == "MaxPool" && !global && n->attrInt("storage_order") == 1),
          {x}, writes);
  return true;
}

}  // namespace tessel::cpu
