// Neural-network operators without a vectorised kernel of their own, as calls to the runtime's plain loops:
// Dropout (training mode with a seed: numpy's draws, rt/dropout.h) and Resize/Upsample (the interpolation
// taps planned at compile time from constant scales/sizes/roi by the operator's own planning, applied by
// rt::resize_taps) and ConvTranspose (geometry resolved by the interpreter's rules, rt::conv_transpose_nd),
// GridSample and NonMaxSuppression (rt/detection.h, written after the interpreter's semantics), and the linear
// quantisation operators (rt/quantize.h), InstanceNormalization, LRN, ReverseSequence (rt/norm_ops.h) and
// the window functions (a generated loop).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "lowerer.h"
#include "tessel/ops/conv_geometry.h"
#include "tessel/ops/resize_plan.h"

namespace tessel::cpu {

bool Lowerer::lowerDropout(const Node* n) {
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype;
  if ((dt != DType::Float32 && dt != DType::Float64) || !n->output(0)) return false;
  std::vector<int> reads{tensorOf(xv)}, writes{tensorOf(n->output(0))};
  auto scalar = [&](size_t i, const char* fallback) -> std::optional<std::string> {
    if (n->numInputs() <= i || !n->input(i)) return std::string(fallback);
    const Value* v = definitionOf(n->input(i));
    if (v->type.staticSize() != 1 || v->type.dtype == DType::Float16 || v->type.dtype == DType::BFloat16)
      return std::nullopt;
    reads.push_back(tensorOf(v));
    return fmt::format("static_cast<double>(*{})", ref(reads.back()));
  };
  const auto ratio = scalar(1, "0.5"), training = scalar(2, "0.0");
  if (!ratio || !training) return false;
  // Without a seed the draws are the interpreter's own generator's: only an identity can be compiled.
  const bool identity = n->numInputs() <= 2 || !n->input(2) || (isConst(n->input(2)) && constTensor(n->input(2))->elementAsDouble(0) == 0);
  if (!n->hasAttr("seed") && !identity) return false;
  std::string mask = "nullptr";
  if (n->numOutputs() > 1 && n->output(1)) {
    writes.push_back(tensorOf(n->output(1)));
    mask = ref(writes.back());
  }
  addStep({n->name(), "Dropout", "dropout_seeded"},
          fmt::format("Dropout '{}' {}", n->name(), shapeToString(xv->type.staticShape())),
          fmt::format("if (!rt::dropout_seeded({}, {}, {}, {}, {}, {} != 0, {}u)) {{\n    m->error = {};\n    return 2;\n  }}",
                      ref(reads[0]), ref(writes[0]), mask, xv->type.staticSize(), *ratio, *training,
                      static_cast<uint32_t>(n->hasAttr("seed") ? n->attrInt("seed") : 0),
                      cppString(n->describe() + ": the ratio must be in [0, 1) in training mode")),
          reads, writes);
  return true;
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerResize(const Node* n) {
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype;
  const Shape xs = xv->type.staticShape(), ys = n->output(0)->type.staticShape();
  if ((dt != DType::Float32 && dt != DType::Float64) || xs.empty() || xs.size() > 8 || ys.size() != xs.size())
    return false;
  const bool upsample = isOp(*n, "Upsample");
  auto operand = [&](size_t i, const Tensor** out) {  // false: computed at run time
    *out = nullptr;
    if (n->numInputs() <= i || !n->input(i)) return true;
    *out = constTensor(n->input(i));
    return *out != nullptr;
  };
  const Tensor *roi = nullptr, *scales = nullptr, *sizes = nullptr;
  if (!(upsample ? operand(1, &scales) : operand(1, &roi) && operand(2, &scales) && operand(3, &sizes))) return false;
  const std::vector<ResizeAxisTaps> axes = resizeTaps(*n, xs, roi, scales, sizes);
  std::vector<int64_t> first, index, outside;
  std::vector<double> weight;
  for (size_t a = 0; a < axes.size(); ++a) {
    if (static_cast<int64_t>(axes[a].taps.size()) != ys[a]) return false;  // the planned output shape differs
    for (size_t c = 0; c < axes[a].taps.size(); ++c) {
      first.push_back(static_cast<int64_t>(index.size()));
      for (const auto& [i, w] : axes[a].taps[c]) index.push_back(i), weight.push_back(w);
      outside.push_back(axes[a].outside[c]);
    }
    first.push_back(static_cast<int64_t>(index.size()));
  }
  const int x = tensorOf(xv), y = tensorOf(n->output(0));
  // float32 resizing only the last two axes, every coordinate inside the input (not tf_crop_and_resize's
  // extrapolation): the separable kernel over planes (rt::resize_2d), threaded.
  const size_t r = xs.size();
  auto keeps = [&](size_t a) {
    if (ys[a] != xs[a]) return false;
    for (int64_t c = 0; c < ys[a]; ++c) {
      const auto& taps = axes[a].taps[static_cast<size_t>(c)];
      if (axes[a].outside[static_cast<size_t>(c)] || taps.size() != 1 || taps[0].first != c || taps[0].second != 1.0)
        return false;
    }
    return true;
  };
  bool planar = dt == DType::Float32 && r >= 2;
  for (size_t a = 0; planar && a + 2 < r; ++a) planar = keeps(a);
  for (size_t a = r - std::min<size_t>(r, 2); planar && a < r; ++a)
    planar = std::none_of(axes[a].outside.begin(), axes[a].outside.end(), [](bool o) { return o; });
  if (planar) {
    int64_t planes = 1;
    for (size_t a = 0; a + 2 < r; ++a) planes *= xs[a];
    const int id = shapeCounter_++;
    auto axisArrays = [&](size_t a, const char* name) {
      std::vector<int64_t> firstA, indexA;
      std::vector<float> weightA;
      for (const auto& taps : axes[a].taps) {
        firstA.push_back(static_cast<int64_t>(indexA.size()));
        for (const auto& [i, w] : taps) indexA.push_back(i), weightA.push_back(static_cast<float>(w));
      }
      firstA.push_back(static_cast<int64_t>(indexA.size()));
      std::string weights;
      for (float w : weightA.empty() ? std::vector<float>{0.0f} : weightA)
        weights += fmt::format("{}{:.9e}f", weights.empty() ? "" : ", ", w);
      plan_.globals += fmt::format("static const float k{}W{}[] = {{{}}};\n", name, id, weights);
      return std::make_pair(int64Array(name, firstA), int64Array(name, indexA.empty() ? std::vector<int64_t>{0} : indexA));
    };
    const auto [rowFirst, rowIndex] = axisArrays(r - 2, "RsRow");
    const auto [colFirst, colIndex] = axisArrays(r - 1, "RsCol");
    addStep({n->name(), n->opType(), "resize_2d"},
            fmt::format("{} '{}' {} -> {}, {} taps (separable, planes)", n->opType(), n->name(), shapeToString(xs),
                        shapeToString(ys), index.size()),
            fmt::format("rt::resize_2d({}, {}, {}, {}, {}, {}, {}, {}, {}, kRsRowW{}, {}, {}, kRsColW{}, pool);", ref(x),
                        ref(y), planes, xs[r - 2], xs[r - 1], ys[r - 2], ys[r - 1], rowFirst, rowIndex, id, colFirst,
                        colIndex, id),
            {x}, {y});
    return true;
  }
  const int id = shapeCounter_++;
  plan_.globals += fmt::format("static const double kRsW{}[] = {{{:.17g}}};\nstatic const uint8_t kRsOut{}[] = {{{}}};\n",
                               id, fmt::join(weight.empty() ? std::vector<double>{0} : weight, ", "), id,
                               fmt::join(outside.empty() ? std::vector<int64_t>{0} : outside, ", "));
  const double extrapolation = upsample ? 0.0 : n->attrFloat("extrapolation_value");
  addStep({n->name(), n->opType(), "resize_taps"},
          fmt::format("{} '{}' {} -> {}, {} taps", n->opType(), n->name(), shapeToString(xs), shapeToString(ys),
                      index.size()),
          fmt::format("rt::resize_taps({}, {}, {}, {}, {}, {}, {}, kRsW{}, kRsOut{}, {:.17g});", ref(x), ref(y), xs.size(),
                      int64Array("RsX", xs), int64Array("RsY", ys), int64Array("RsFirst", first),
                      int64Array("RsIndex", index), id, id, extrapolation),
          {x}, {y});
  return true;
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerConvTranspose(const Node* n) {
  if (n->numInputs() < 2 || !n->output(0)) return false;
  const Value* xv = definitionOf(n->input(0));
  const Value* wv = definitionOf(n->input(1));
  const DType dt = xv->type.dtype;
  if ((dt != DType::Float32 && dt != DType::Float64) || wv->type.dtype != dt) return false;
  const Shape xs = xv->type.staticShape(), ws = wv->type.staticShape(), ys = n->output(0)->type.staticShape();
  const ConvWindow p = convTransposeWindow(*n, xs, ws);
  Shape planned{p.batch, p.outChannels};
  for (size_t d = 3 - (xs.size() - 2); d < 3; ++d) planned.push_back(p.out[d]);
  if (planned != ys) return false;
  std::vector<int> reads{tensorOf(xv), tensorOf(wv)};
  std::string bias = "nullptr";
  if (n->numInputs() > 2 && n->input(2)) {
    const Value* bv = definitionOf(n->input(2));
    if (bv->type.dtype != dt || bv->type.staticSize() != p.outChannels) return false;
    reads.push_back(tensorOf(bv));
    bias = ref(reads.back());
  }
  const int y = tensorOf(n->output(0)), id = shapeCounter_++;
  auto list = [](const std::array<int64_t, 3>& v) { return fmt::format("{{{}, {}, {}}}", v[0], v[1], v[2]); };
  plan_.globals += fmt::format("static const rt::ConvNdShape kConvT{} = {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}}};\n", id,
                               p.batch, p.inChannels, p.outChannels, p.groups, list(p.in), list(p.out),
                               list(p.kernel), list(p.stride), list(p.dilation), list(p.pad));
  double flops = 2.0 * static_cast<double>(shapeSize(xs)) * static_cast<double>(shapeSize(ws)) / static_cast<double>(ws[0]);
  addStep({n->name(), "ConvTranspose", "conv_transpose_nd", flops},
          fmt::format("ConvTranspose '{}' {} -> {}", n->name(), shapeToString(xs), shapeToString(ys)),
          fmt::format("rt::conv_transpose_nd<{}>(kConvT{}, {}, {}, {}, {});", cppElementType(dt), id, ref(reads[0]), ref(reads[1]), bias, ref(y)),
          reads, {y});
  return true;
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerGridSample(const Node* n) {
  const Value* xv = definitionOf(n->input(0));
  const Value* gv = definitionOf(n->input(1));
  const DType dt = xv->type.dtype;
  const Shape xs = xv->type.staticShape(), gs = gv->type.staticShape();
  if ((dt != DType::Float32 && dt != DType::Float64) || gv->type.dtype != dt || xs.size() != 4 || gs.size() != 4 ||
      gs[0] != xs[0] || gs[3] != 2)
    return false;
  const std::string mode = n->attrString("mode"), padding = n->attrString("padding_mode");
  const int x = tensorOf(xv), g = tensorOf(gv), y = tensorOf(n->output(0));
  addStep({n->name(), "GridSample", "grid_sample"},
          fmt::format("GridSample '{}' {} at {} ({}, {})", n->name(), shapeToString(xs), shapeToString(gs), mode, padding),
          fmt::format("rt::grid_sample({}, {}, {}, {}, {}, {}, {}, {}, {}, rt::GridMode({}), rt::GridPadding({}), {});",
                      ref(x), ref(g), ref(y), xs[0], xs[1], xs[2], xs[3], gs[1], gs[2],
                      mode == "nearest" ? 1 : mode == "bicubic" ? 2 : 0, padding == "border" ? 1 : padding == "reflection" ? 2 : 0,
                      n->attrInt("align_corners") != 0),
          {x, g}, {y});
  return true;
}

bool Lowerer::lowerNonMaxSuppression(const Node* n) {
  const Value* bv = definitionOf(n->input(0));
  const Value* sv = definitionOf(n->input(1));
  const DType dt = bv->type.dtype;
  const Shape bs = bv->type.staticShape(), ss = sv->type.staticShape(), ys = n->output(0)->type.staticShape();
  if ((dt != DType::Float32 && dt != DType::Float64) || sv->type.dtype != dt || bs.size() != 3 || bs[2] != 4 ||
      ss.size() != 3 || ss[0] != bs[0] || ss[2] != bs[1] || ys.size() != 2 || ys[1] != 3)
    return false;
  std::vector<int> reads{tensorOf(bv), tensorOf(sv)};
  // The optional scalars, read when the step runs: max_output_boxes_per_class, iou_threshold, score_threshold.
  std::string scalars[3] = {"0", "0.0", ""};
  for (size_t i = 2; i < 5; ++i) {
    if (n->numInputs() <= i || !n->input(i)) continue;
    const Value* v = definitionOf(n->input(i));
    if (v->type.staticSize() == 0) continue;
    if (v->type.staticSize() != 1 || v->type.dtype == DType::Float16 || v->type.dtype == DType::BFloat16) return false;
    reads.push_back(tensorOf(v));
    scalars[i - 2] = fmt::format("static_cast<{}>(*{})", i == 2 ? "int64_t" : "double", ref(reads.back()));
  }
  const int y = tensorOf(n->output(0));
  addStep({n->name(), "NonMaxSuppression", "non_max_suppression"},
          fmt::format("NonMaxSuppression '{}' {} boxes, {} selected", n->name(), shapeToString(bs), ys[0]),
          fmt::format("{{\n    std::vector<int64_t> selected;\n"
                      "    rt::non_max_suppression({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, selected);\n"
                      "    if (static_cast<int64_t>(selected.size()) != {}) {{\n      m->error = {};\n      return 2;\n    }}\n"
                      "    std::memcpy({}, selected.data(), selected.size() * sizeof(int64_t));\n  }}",
                      ref(reads[0]), ref(reads[1]), bs[0], bs[1], ss[1], scalars[0], scalars[1],
                      scalars[2].empty() ? "false" : "true", scalars[2].empty() ? "0.0" : scalars[2],
                      n->attrInt("center_point_box") != 0, ys[0] * 3,
                      cppString(fmt::format("{}: selects another number of boxes than the {} this model was compiled "
                                            "for", n->describe(), ys[0])),
                      ref(y)),
          reads, {y});
  return true;
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerQuantize(const Node* n) {
  const Value* xv = definitionOf(n->input(0));
  const Shape xs = xv->type.staticShape();
  const int64_t count = shapeSize(xs);
  std::vector<int> reads{tensorOf(xv)}, writes;
  for (const Value* o : n->outputs())
    if (o) writes.push_back(tensorOf(o));
  auto step = [&](const std::string& kernel, const std::string& code) {
    addStep({n->name(), n->opType(), kernel}, fmt::format("{} '{}' {}", n->opType(), n->name(), shapeToString(xs)), code,
            reads, writes);
    return true;
  };
  if (isOp(*n, "DynamicQuantizeLinear")) {
    if (xv->type.dtype != DType::Float32 || writes.size() != 3) return false;
    return step("dynamic_quantize_linear",
                fmt::format("rt::dynamic_quantize_linear({}, {}, {}, {}, {});", ref(reads[0]), count, ref(writes[0]),
                            ref(writes[1]), ref(writes[2])));
  }
  if (n->numInputs() < 2 || writes.size() != 1) return false;
  const Value* sv = definitionOf(n->input(1));
  const bool quantize = isOp(*n, "QuantizeLinear");
  const DType q = quantize ? n->output(0)->type.dtype : xv->type.dtype;
  if (sv->type.dtype != DType::Float32 || (q != DType::UInt8 && q != DType::Int8) ||
      (quantize ? xv->type.dtype != DType::Float32 : n->output(0)->type.dtype != DType::Float32))
    return false;
  // Per tensor, or along `axis` when the scale is 1-D with the axis' extent (> 1).
  int64_t inner = 1, extent = 1;
  const int64_t scales = sv->type.staticSize();
  if (sv->type.rank() == 1 && scales > 1) {
    int64_t axis = n->attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (axis < 0 || axis >= static_cast<int64_t>(xs.size()) || xs[axis] != scales) return false;
    extent = scales;
    for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  } else if (scales != 1) {
    return false;
  }
  reads.push_back(tensorOf(sv));
  std::string zero = "nullptr";
  if (n->numInputs() > 2 && n->input(2)) {
    const Value* zv = definitionOf(n->input(2));
    if (zv->type.dtype != q || zv->type.staticSize() != scales) return false;
    reads.push_back(tensorOf(zv));
    zero = ref(reads.back());
  }
  const char* type = cppElementType(q);
  return step(quantize ? "quantize_linear" : "dequantize_linear",
              fmt::format("rt::{}<{}>({}, {}, {}, {}, {}, {}, {});", quantize ? "quantize_linear" : "dequantize_linear",
                          type, ref(reads[0]), count, ref(reads[1]), zero, inner, extent, ref(writes[0])));
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerNormOp(const Node* n) {
  static const std::set<std::string> kOps = {"InstanceNormalization", "LRN", "HannWindow", "HammingWindow",
                                             "BlackmanWindow"};
  if (!n->domain().empty() || !kOps.count(n->opType()) || n->numInputs() < 1 || !n->input(0) || !n->output(0))
    return false;
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype;
  const Shape xs = xv->type.staticShape();
  const bool window = isOp(*n, "HannWindow") || isOp(*n, "HammingWindow") || isOp(*n, "BlackmanWindow");
  if (window) {  // a function of the (run-time) size only: computed by the step, the size checked
    const DType yt = n->output(0)->type.dtype;
    const Shape ys = n->output(0)->type.staticShape();
    if ((yt != DType::Float32 && yt != DType::Float64) || !isInteger(dt) || shapeSize(xs) != 1 || ys.size() != 1)
      return false;
    const char* formula = isOp(*n, "HannWindow")      ? "0.5 - 0.5 * std::cos(x)"
                          : isOp(*n, "HammingWindow") ? "25.0 / 46.0 - (21.0 / 46.0) * std::cos(x)"
                                                      : "0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x)";
    const int s = tensorOf(xv), y = tensorOf(n->output(0));
    const int64_t size = ys[0];
    const double denom = static_cast<double>(n->attrInt("periodic") != 0 ? size : size - 1);
    addStep({n->name(), n->opType(), "window"}, fmt::format("{} '{}' of {}", n->opType(), n->name(), size),
            fmt::format("if (static_cast<int64_t>(*{}) != {}) {{\n    m->error = {};\n    return 2;\n  }}\n"
                        "  for (int64_t i = 0; i < {}; ++i) {{\n    const double x = 2.0 * {:.17g} * static_cast<double>(i) / {:.17g};\n"
                        "    {}[i] = static_cast<{}>({} == 1 ? 1.0 : {});\n  }}",
                        ref(s), size, cppString(n->describe() + ": the size differs from the one this model was compiled for"),
                        size, M_PI, denom, ref(y), cppElementType(yt), size, formula),
            {s}, {y});
    return true;
  }
  if ((dt != DType::Float32 && dt != DType::Float64) || xs.size() < 2) return false;
  const int64_t batch = xs[0], channels = xs[1], inner = shapeSize(xs) / std::max<int64_t>(1, batch * channels);
  const char* type = cppElementType(dt);
  std::vector<int> reads{tensorOf(xv)};
  const int y = tensorOf(n->output(0));
  auto step = [&](const std::string& kernel, const std::string& code) {
    addStep({n->name(), n->opType(), kernel}, fmt::format("{} '{}' {}", n->opType(), n->name(), shapeToString(xs)), code,
            reads, {y});
    return true;
  };
  if (isOp(*n, "InstanceNormalization")) {
    for (size_t i = 1; i < 3; ++i) {
      const Value* p = n->numInputs() > i && n->input(i) ? definitionOf(n->input(i)) : nullptr;
      if (!p || p->type.dtype != dt || p->type.staticSize() != channels) return false;
      reads.push_back(tensorOf(p));
    }
    return step("instance_norm", fmt::format("rt::instance_norm<{}>({}, {}, {}, {}, {}, {}, {}, {:.17g});", type,
                                             ref(reads[0]), ref(reads[1]), ref(reads[2]), ref(y), batch, channels, inner,
                                             static_cast<double>(n->attrFloat("epsilon"))));
  }
  if (isOp(*n, "LRN")) {
    if (n->attrInt("size") < 1) return false;
    return step("lrn", fmt::format("rt::lrn<{}>({}, {}, {}, {}, {}, {}, {:.17g}, {:.17g}, {:.17g});", type, ref(reads[0]),
                                   ref(y), batch, channels, inner, n->attrInt("size"),
                                   static_cast<double>(n->attrFloat("alpha")), static_cast<double>(n->attrFloat("beta")),
                                   static_cast<double>(n->attrFloat("bias"))));
  }
  return false;
}

bool Lowerer::lowerReverseSequence(const Node* n) {
  const Value* xv = definitionOf(n->input(0));
  const Value* lv = definitionOf(n->input(1));
  const Shape xs = xv->type.staticShape();
  const int64_t timeAxis = n->attrInt("time_axis"), batchAxis = n->attrInt("batch_axis");
  if (!compiledDType(xv->type.dtype) || xs.size() < 2 || (lv->type.dtype != DType::Int64 && lv->type.dtype != DType::Int32) ||
      !((timeAxis == 0 && batchAxis == 1) || (timeAxis == 1 && batchAxis == 0)) || lv->type.staticSize() != xs[batchAxis])
    return false;
  const int x = tensorOf(xv), l = tensorOf(lv), y = tensorOf(n->output(0));
  const int64_t inner = shapeSize(xs) / (xs[0] * xs[1]) * static_cast<int64_t>(dtypeSize(xv->type.dtype));
  addStep({n->name(), "ReverseSequence", "reverse_sequence"},
          fmt::format("ReverseSequence '{}' {}", n->name(), shapeToString(xs)),
          fmt::format("if (!rt::reverse_sequence({}, {}, {}, {}, {}, {}, {})) {{\n    m->error = {};\n    return 2;\n  }}",
                      ref(x), ref(y), ref(l), xs[timeAxis], xs[batchAxis], inner, timeAxis == 0,
                      cppString(n->describe() + ": a sequence length is outside [0, time]")),
          {x, l}, {y});
  return true;
}

}  // namespace tessel::cpu
