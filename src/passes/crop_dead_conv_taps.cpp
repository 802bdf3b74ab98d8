// Pass crop-dead-conv-taps: a Conv's kernel rows or columns that read only padding, for every output pixel,
// are cut off the kernel (exact: they multiply zeros). Atrous convolutions whose dilation reaches past the map
// have them: DeepLabV3's ASPP branch of rate 36 on a 33x33 map (a 520x520 input at output stride 16) reads
// the map only through its centre tap, so its 3x3 kernel becomes 1x1 with no padding -- a ninth of the work
// and the pointwise kernels instead of im2col. The cut taps' padding goes with them (pad_begin - k0 * d,
// pad_end - (K - 1 - k1) * d, so the output size is unchanged); a cut that would need a negative pad is not
// made. An axis left with one tap gets dilation 1 (it has no effect there).
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// The first and last kernel position of one spatial axis that reads the input for some output position.
std::optional<std::pair<int64_t, int64_t>> liveTaps(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                                    int64_t dilation, int64_t padBegin) {
  int64_t first = -1, last = -1;
  for (int64_t k = 0; k < kernel; ++k)
    for (int64_t o = 0; o < out; ++o) {
      const int64_t i = o * stride - padBegin + k * dilation;
      if (i >= 0 && i < in) {
        if (first < 0) first = k;
        last = k;
        break;
      }
    }
  if (first < 0) return std::nullopt;
  return std::make_pair(first, last);
}

bool crop(Graph& graph, Node* conv) {
  if (!isOp(*conv, "Conv") || !conv->domain().empty() || conv->numOutputs() != 1 || !conv->output(0)) return false;
  if (conv->hasAttr("auto_pad") && conv->attrString("auto_pad") != "NOTSET") return false;
  const Tensor* w = passes::constantData(conv->input(1));
  if (!w || w->dtype() != DType::Float32 || w->rank() != 4) return false;
  if (!passes::isStaticF32(conv->input(0)) || !passes::isStaticF32(conv->output(0))) return false;
  const Shape x = conv->input(0)->type.staticShape(), y = conv->output(0)->type.staticShape(), ws = w->shape();
  if (x.size() != 4 || y.size() != 4) return false;
  const std::vector<int64_t> strides = passes::intsOr(*conv, "strides", {1, 1});
  std::vector<int64_t> dilations = passes::intsOr(*conv, "dilations", {1, 1}), pads = passes::intsOr(*conv, "pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4) return false;
  int64_t k0[2], k1[2];
  bool cut = false;
  for (int a = 0; a < 2; ++a) {
    const auto live = liveTaps(x[2 + a], y[2 + a], ws[2 + a], strides[a], dilations[a], pads[a]);
    if (!live) return false;  // the output is the bias alone: left to the kernels
    k0[a] = live->first, k1[a] = live->second;
    const int64_t begin = pads[a] - k0[a] * dilations[a], end = pads[2 + a] - (ws[2 + a] - 1 - k1[a]) * dilations[a];
    if (begin < 0 || end < 0) return false;
    cut = cut || k0[a] > 0 || k1[a] < ws[2 + a] - 1;
  }
  if (!cut) return false;
  const Shape cropped{ws[0], ws[1], k1[0] - k0[0] + 1, k1[1] - k0[1] + 1};
  Tensor nw(DType::Float32, cropped);
  const float* src = w->data<float>();
  float* dst = nw.data<float>();
  for (int64_t m = 0; m < ws[0] * ws[1]; ++m)
    for (int64_t kh = k0[0]; kh <= k1[0]; ++kh)
      for (int64_t kw = k0[1]; kw <= k1[1]; ++kw) *dst++ = src[(m * ws[2] + kh) * ws[3] + kw];
  for (int a = 0; a < 2; ++a) {
    pads[2 + a] -= (ws[2 + a] - 1 - k1[a]) * dilations[a];
    pads[a] -= k0[a] * dilations[a];
    if (cropped[2 + a] == 1) dilations[a] = 1;
  }
  const auto attrs = conv->attrs();
  std::vector<Value*> inputs{conv->input(0), graph.addConstant(graph.uniqueName(conv->name() + ".weight_live"), nw)};
  if (conv->numInputs() > 2 && conv->input(2)) inputs.push_back(conv->input(2));
  Node* out = passes::replaceChain(graph, {conv}, "Conv", "", inputs, conv->name());
  for (const auto& [k, v] : attrs) out->setAttr(k, v);
  if (out->hasAttr("kernel_shape")) out->setAttr("kernel_shape", std::vector<int64_t>{cropped[2], cropped[3]});
  out->setAttr("pads", pads);
  out->setAttr("dilations", dilations);
  return true;
}

class CropDeadConvTapsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    for (Node* n : passes::nodeSnapshot(graph)) changed = crop(graph, n) || changed;
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(crop_dead_conv_taps, "crop-dead-conv-taps",
                     "cuts a Conv's kernel rows and columns that read only padding for every output pixel (exact): "
                     "an atrous conv whose dilation reaches past the map shrinks, DeepLabV3's rate-36 3x3 on a 33x33 "
                     "map to a 1x1",
                     [] { return std::make_unique<CropDeadConvTapsPass>(); });

}  // namespace tessel
