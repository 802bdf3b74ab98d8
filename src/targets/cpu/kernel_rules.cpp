// What the cpu target's kernels cover: the layout and geometry of convolutions (see kernel_rules.h).
#include "kernel_rules.h"

#include <algorithm>

#include "tessel/ops/registry.h"

namespace tessel::cpu {

bool runsBlocked(const Node& n) {
  auto it = n.meta.find("layout");
  const std::string* layout = it == n.meta.end() ? nullptr : std::get_if<std::string>(&it->second);
  return layout && *layout == "nchwc8";
}

bool isConvNode(const Node& n) { return isOp(n, "FusedConv", "tessel") || isOp(n, "Conv"); }

std::optional<rt::Conv2dShape> conv2dShape(const Node& n) {
  const Value* xv = n.input(0);
  const Value* wv = n.input(1);
  const Value* yv = n.output(0);
  const auto staticF32 = [](const Value* v) { return v && v->type.dtype == DType::Float32 && v->type.isStatic(); };
  if (!staticF32(xv) || !staticF32(yv) || !wv || !wv->type.isStatic()) return std::nullopt;
  const Shape x = xv->type.staticShape(), w = wv->type.staticShape();
  if (x.size() != 4 || w.size() != 4) return std::nullopt;
  rt::Conv2dShape s;
  s.batch = x[0];
  s.in_channels = x[1];
  s.in_h = x[2];
  s.in_w = x[3];
  s.out_channels = w[0];
  s.kernel_h = w[2];
  s.kernel_w = w[3];
  s.groups = n.attrInt("group");
  // strides, dilations and pads are optional (ONNX: 1, 1 and 0 along each axis).
  auto ints = [&](const char* name) { return n.hasAttr(name) ? n.attrInts(name) : std::vector<int64_t>{}; };
  auto strides = ints("strides");
  auto dil = ints("dilations");
  auto pads = ints("pads");
  if (strides.size() == 2) s.stride_h = strides[0], s.stride_w = strides[1];
  if (dil.size() == 2) s.dilation_h = dil[0], s.dilation_w = dil[1];
  if (pads.size() == 4) s.pad_top = pads[0], s.pad_left = pads[1], s.pad_bottom = pads[2], s.pad_right = pads[3];
  std::string autoPad = n.hasAttr("auto_pad") ? n.attrString("auto_pad") : "NOTSET";
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    // Total padding that gives ceil(in / stride) outputs; the odd unit goes last for SAME_UPPER.
    auto same = [&](int64_t in, int64_t k, int64_t st, int64_t d, int64_t& lo, int64_t& hi) {
      int64_t out = (in + st - 1) / st;
      int64_t total = std::max<int64_t>(0, (out - 1) * st + d * (k - 1) + 1 - in);
      lo = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      hi = total - lo;
    };
    same(s.in_h, s.kernel_h, s.stride_h, s.dilation_h, s.pad_top, s.pad_bottom);
    same(s.in_w, s.kernel_w, s.stride_w, s.dilation_w, s.pad_left, s.pad_right);
  } else if (autoPad == "VALID") {
    s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 0;
  }
  return s;
}

bool channelScaleOperand(const Shape& small, const Shape& out) {
  return out.size() == 4 && small.size() == 4 && small[1] == out[1] && small[2] == 1 && small[3] == 1 &&
         (small[0] == 1 || small[0] == out[0]);
}

}  // namespace tessel::cpu
