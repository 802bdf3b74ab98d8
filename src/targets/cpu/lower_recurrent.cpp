// RNN, GRU and LSTM through the runtime's portable recurrent kernel (tessel/rt/recurrent.h): float32
// tensors, the attributes as one constant rt::RnnShape.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "lowerer.h"

namespace tessel::cpu {
namespace {

/// ONNX's recurrent activation functions (lower case) in the order of rt::RnnActivation, with the default
/// alpha and beta of each.
struct ActivationSpelling {
  const char* onnx;
  bool takesAlpha, takesBeta;
  float alpha, beta;
};
constexpr ActivationSpelling kActivations[] = {
    {"sigmoid", false, false, 0, 0},          {"tanh", false, false, 0, 0},
    {"relu", false, false, 0, 0},             {"affine", true, true, 1, 0},
    {"leakyrelu", true, false, 0.01f, 0},     {"thresholdedrelu", true, false, 1, 0},
    {"scaledtanh", true, true, 1, 1},         {"hardsigmoid", true, true, 0.2f, 0.5f},
    {"elu", true, false, 1, 0},               {"softsign", false, false, 0, 0},
    {"softplus", false, false, 0, 0}};

}  // namespace

bool Lowerer::lowerRecurrent(const Node* n) {
  const std::string& op = n->opType();
  const bool lstm = isOp(*n, "LSTM"), gru = isOp(*n, "GRU");
  const size_t perDirection = lstm ? 3 : gru ? 2 : 1;
  // Float tensors throughout, sequence_lens int32.
  for (size_t i = 0; i < n->numInputs(); ++i)
    if (n->input(i) && definitionOf(n->input(i))->type.dtype != (i == 4 ? DType::Int32 : DType::Float32)) return false;
  const Shape xs = definitionOf(n->input(0))->type.staticShape(), rs = definitionOf(n->input(2))->type.staticShape();
  if (xs.size() != 3 || rs.size() != 3) return false;
  const std::string direction = n->attrString("direction");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batchFirst = n->attrInt("layout") == 1;
  std::vector<std::string> names;
  if (n->hasAttr("activations")) names = n->attrStrings("activations");
  if (names.empty())
    names = lstm ? std::vector<std::string>{"sigmoid", "tanh", "tanh"}
            : gru ? std::vector<std::string>{"sigmoid", "tanh"}
                  : std::vector<std::string>{"tanh"};
  if (names.size() == perDirection && dirs == 2) names.insert(names.end(), names.begin(), names.end());
  if (names.size() != perDirection * static_cast<size_t>(dirs)) return false;
  const std::vector<float> alphas = n->hasAttr("activation_alpha") ? n->attrFloats("activation_alpha") : std::vector<float>{};
  const std::vector<float> betas = n->hasAttr("activation_beta") ? n->attrFloats("activation_beta") : std::vector<float>{};
  std::string acts, params;
  size_t ai = 0, bi = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    std::string lower = names[k];
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const ActivationSpelling* a = std::find_if(std::begin(kActivations), std::end(kActivations),
                                               [&](const ActivationSpelling& s) { return lower == s.onnx; });
    if (a == std::end(kActivations)) return false;
    float alpha = a->takesAlpha && ai < alphas.size() ? alphas[ai++] : a->alpha;
    float beta = a->takesBeta && bi < betas.size() ? betas[bi++] : a->beta;
    acts += fmt::format("  s.act[{}][{}] = static_cast<rt::RnnActivation>({});\n", k / perDirection, k % perDirection,
                        a - std::begin(kActivations));
    params += fmt::format("  s.alpha[{0}][{1}] = {2};\n  s.beta[{0}][{1}] = {3};\n", k / perDirection, k % perDirection,
                          floatLiteral(alpha), floatLiteral(beta));
  }
  const std::string shapeName = fmt::format("kRnn{}", shapeCounter_++);
  plan_.globals += fmt::format(
      "static const rt::RnnShape {0} = [] {{\n  rt::RnnShape s;\n  s.cell = rt::RnnCell::{1};\n  s.seq = {2};\n"
      "  s.batch = {3};\n  s.input = {4};\n  s.hidden = {5};\n  s.directions = {6};\n  s.reverse_only = {7};\n"
      "  s.batch_first = {8};\n  s.linear_before_reset = {9};\n  s.input_forget = {10};\n  s.clip = {11};\n{12}{13}"
      "  return s;\n}}();\n",
      shapeName, lstm ? "Lstm" : gru ? "Gru" : "Simple", xs[batchFirst ? 1 : 0], xs[batchFirst ? 0 : 1], xs[2], rs[2],
      dirs, direction == "reverse", batchFirst, gru && n->attrInt("linear_before_reset") != 0,
      lstm && n->attrInt("input_forget") != 0, floatLiteral(n->hasAttr("clip") ? n->attrFloat("clip") : 0.0f), acts,
      params);
  std::vector<int> reads, writes;
  auto operand = [&](size_t i) {
    if (i >= n->numInputs() || !n->input(i)) return std::string("nullptr");
    reads.push_back(tensorOf(n->input(i)));
    return ref(reads.back());
  };
  auto result = [&](size_t i) {
    if (i >= n->numOutputs() || !n->output(i)) return std::string("nullptr");
    writes.push_back(tensorOf(n->output(i)));
    return ref(writes.back());
  };
  const std::string x = operand(0), w = operand(1), r = operand(2), b = operand(3), lens = operand(4),
                    h0 = operand(5), c0 = operand(6), p = operand(7);
  const std::string y = result(0), yh = result(1), yc = result(2);
  const double flops = 2.0 * static_cast<double>(xs[0] * xs[1] * rs[0] * rs[1] * (xs[2] + rs[2]));
  addStep({n->name(), op, "recurrent", flops}, fmt::format("{} '{}' {} hidden {}", op, n->name(), shapeToString(xs), rs[2]),
          fmt::format("if (!rt::recurrent({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})) {{\n    m->error = {};\n"
                      "    return 2;\n  }}",
                      shapeName, x, w, r, b, lens, h0, c0, p, y, yh, yc,
                      cppString(n->describe() + ": a sequence length is outside [0, seq_length]")),
          reads, writes);
  return true;
}

}  // namespace tessel::cpu
