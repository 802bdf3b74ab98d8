// The scalar C++ expression of each element-wise operator the generated broadcast loop computes (any
// element type; the float32 vector kernels take float32 nodes first): comparisons and logic, Where and
// Expand, trigonometric and rounding functions, Pow, Mod on floats, BitShift, the variadic Sum/Mean/Max/Min
// of up to three inputs, and the activations with the formulas the registry keeps (scalar_expressions.h). Operands are a, b, c; dbl(x) is x as a
// double, as the reference interpreter computes most of these.
#include <fmt/format.h>

#include <functional>
#include <map>

#include "lowerer.h"
#include "tessel/ops/scalar_expressions.h"

namespace tessel::cpu {
namespace {

using ExprFn = std::function<std::optional<ElementExpr>(const Node*)>;

ExprFn fixed(std::string expr, size_t arity) {
  return [expr = std::move(expr), arity](const Node*) { return ElementExpr{expr, arity}; };
}

const std::map<std::string, ExprFn>& table() {
  static const std::map<std::string, ExprFn> t = {
      {"Equal", fixed("a == b", 2)}, {"Less", fixed("a < b", 2)}, {"Greater", fixed("a > b", 2)},
      {"LessOrEqual", fixed("a <= b", 2)}, {"GreaterOrEqual", fixed("a >= b", 2)},
      {"And", fixed("(a != 0) && (b != 0)", 2)}, {"Or", fixed("(a != 0) || (b != 0)", 2)},
      {"Xor", fixed("(a != 0) != (b != 0)", 2)}, {"Not", fixed("a == 0", 1)}, {"Where", fixed("a ? b : c", 3)},
      {"Expand", fixed("a", 1)}, {"Identity", fixed("a", 1)},
      {"Sin", fixed("std::sin(dbl(a))", 1)}, {"Cos", fixed("std::cos(dbl(a))", 1)}, {"Tan", fixed("std::tan(dbl(a))", 1)},
      {"Asin", fixed("std::asin(dbl(a))", 1)}, {"Acos", fixed("std::acos(dbl(a))", 1)},
      {"Atan", fixed("std::atan(dbl(a))", 1)}, {"Sinh", fixed("std::sinh(dbl(a))", 1)},
      {"Cosh", fixed("std::cosh(dbl(a))", 1)}, {"Asinh", fixed("std::asinh(dbl(a))", 1)},
      {"Acosh", fixed("std::acosh(dbl(a))", 1)}, {"Atanh", fixed("std::atanh(dbl(a))", 1)},
      {"Floor", fixed("std::floor(dbl(a))", 1)}, {"Ceil", fixed("std::ceil(dbl(a))", 1)},
      {"Round", fixed("std::nearbyint(dbl(a))", 1)}, {"Sign", fixed("(a > 0) - (a < 0)", 1)},
      {"Exp", fixed("std::exp(dbl(a))", 1)}, {"Log", fixed("std::log(dbl(a))", 1)}, {"Sqrt", fixed("std::sqrt(dbl(a))", 1)},
      {"Reciprocal", fixed("1.0 / dbl(a)", 1)}, {"Erf", fixed("std::erf(dbl(a))", 1)},
      {"IsNaN", fixed("std::isnan(dbl(a))", 1)}, {"Neg", fixed("-a", 1)}, {"Abs", fixed("a < 0 ? -a : a", 1)},
      {"IsInf", [](const Node* n) -> std::optional<ElementExpr> {
         const bool neg = !n->hasAttr("detect_negative") || n->attrInt("detect_negative") != 0;
         const bool pos = !n->hasAttr("detect_positive") || n->attrInt("detect_positive") != 0;
         return ElementExpr{fmt::format("std::isinf(dbl(a)) && ((dbl(a) > 0 && {}) || (dbl(a) < 0 && {}))", pos, neg), 1};
       }},
      {"Pow", fixed("std::pow(dbl(a), dbl(b))", 2)},
      {"Add", fixed("a + b", 2)}, {"Sub", fixed("a - b", 2)}, {"Mul", fixed("a * b", 2)},
      {"Mod", [](const Node* n) -> std::optional<ElementExpr> {  // integers: lowerBroadcastOp checks for 0
         const bool fmod = n->hasAttr("fmod") && n->attrInt("fmod") != 0;
         if (!isFloat(n->output(0)->type.dtype)) return ElementExpr{fmt::format("int_mod(a, b, {})", fmod), 2};
         return ElementExpr{fmod ? "std::fmod(dbl(a), dbl(b))" : "floor_mod(dbl(a), dbl(b))", 2};
       }},
      {"Div", [](const Node* n) -> std::optional<ElementExpr> {
         if (!isFloat(n->output(0)->type.dtype)) return ElementExpr{"a / b", 2};  // truncates; b checked
         return ElementExpr{"dbl(a) / dbl(b)", 2};
       }},
      {"BitShift", [](const Node* n) -> std::optional<ElementExpr> {
         return ElementExpr{n->attrString("direction") == "LEFT" ? "a << b" : "a >> b", 2};
       }},
  };
  return t;
}

}  // namespace

std::optional<ElementExpr> elementExpression(const Node* n) {
  if (!n->domain().empty() || n->numOutputs() != 1) return std::nullopt;
  const std::string& op = n->opType();
  const size_t k = n->numInputs();
  if ((isOp(*n, "Sum") || isOp(*n, "Max") || isOp(*n, "Min") || isOp(*n, "Mean")) && k >= 1 && k <= 3) {
    static const char* names[] = {"a", "b", "c"};
    std::string expr = names[0];
    for (size_t i = 1; i < k; ++i) {
      if (isOp(*n, "Sum") || isOp(*n, "Mean")) expr = fmt::format("{} + dbl({})", i == 1 ? "dbl(a)" : expr, names[i]);
      else expr = fmt::format("({0} {1} {2} || {2} != {2} ? {2} : {0})", i == 1 ? "a" : "(" + expr + ")",
                              isOp(*n, "Max") ? "<" : ">", names[i]);
    }
    if (isOp(*n, "Mean")) expr = fmt::format("({}) / {}.0", k == 1 ? "dbl(a)" : expr, k);
    return ElementExpr{expr, k};
  }
  std::optional<ElementExpr> e;
  if (std::optional<std::string> activation = activationExpression(*n))  // the registry's (src/ops) formulas
    e = ElementExpr{*activation, isOp(*n, "PRelu") ? size_t{2} : size_t{1}};
  auto it = table().find(op);
  if (!e && it == table().end()) return std::nullopt;
  // 16-bit floats are read and written through float (lowerBroadcastOp converts the operands and result).
  if (!e) e = it->second(n);
  if (e && k < e->arity) return std::nullopt;
  return e;
}

}  // namespace tessel::cpu
