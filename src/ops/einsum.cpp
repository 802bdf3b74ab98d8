// Einsum: Einstein summation over labelled axes (explicit and implicit output, ellipsis broadcasting, diagonals).
#include <algorithm>
#include <cctype>
#include <map>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

/// Labels are 0..51 for letters; ellipsis axes get labels kEllipsisBase + position (right-aligned).
constexpr int kEllipsisBase = 64;

int letterLabel(char ch) { return std::isupper(static_cast<unsigned char>(ch)) ? ch - 'A' : 26 + (ch - 'a'); }

std::string labelName(int label) {
  if (label >= kEllipsisBase) return "...";
  return std::string(1, static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)));
}

/// One side of the equation term: letters and at most one ellipsis, as written.
struct Term {
  std::vector<int> letters;  ///< letter labels in order, with -1 where the ellipsis stands
  bool hasEllipsis = false;
};

struct ParsedEquation {
  std::vector<Term> inputs;
  std::optional<Term> output;  ///< absent in implicit mode ("ij,jk")
};

Term parseTerm(const std::string& text, const Node& node) {
  Term t;
  for (size_t i = 0; i < text.size(); ++i) {
    char ch = text[i];
    if (ch == '.') {
      if (text.compare(i, 3, "...") != 0 || t.hasEllipsis)
        throw UserError(fmt::format("{}: malformed ellipsis in equation term '{}'", node.describe(), text));
      t.hasEllipsis = true;
      t.letters.push_back(-1);
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch))) {
      t.letters.push_back(letterLabel(ch));
    } else {
      throw UserError(fmt::format("{}: unexpected character '{}' in equation term '{}'", node.describe(), ch, text));
    }
  }
  return t;
}

ParsedEquation parseEquation(const Node& node) {
  std::string eq;
  for (char ch : node.attrString("equation"))
    if (!std::isspace(static_cast<unsigned char>(ch))) eq += ch;
  ParsedEquation p;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    p.inputs.push_back(parseTerm(lhs.substr(start, comma - start), node));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) p.output = parseTerm(eq.substr(arrow + 2), node);
  return p;
}

/// Every input and the output as lists of labels, with ellipses expanded for the given input ranks.
struct LabelledEquation {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  int ellipsisRank = 0;
};

std::vector<int> expandTerm(const Term& t, int ellipsisDims, int ellipsisRank) {
  std::vector<int> out;
  for (int l : t.letters) {
    if (l >= 0) {
      out.push_back(l);
      continue;
    }
    for (int e = ellipsisRank - ellipsisDims; e < ellipsisRank; ++e) out.push_back(kEllipsisBase + e);
  }
  return out;
}

LabelledEquation labelEquation(const ParsedEquation& p, const std::vector<int64_t>& ranks, const Node& node) {
  if (p.inputs.size() != ranks.size())
    throw UserError(fmt::format("{}: equation has {} input terms but the node has {} inputs", node.describe(),
                                p.inputs.size(), ranks.size()));
  LabelledEquation eq;
  std::vector<int> ellipsisDims(ranks.size(), 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    int letters = static_cast<int>(p.inputs[i].letters.size()) - (p.inputs[i].hasEllipsis ? 1 : 0);
    int extra = static_cast<int>(ranks[i]) - letters;
    if (extra < 0 || (extra > 0 && !p.inputs[i].hasEllipsis))
      throw UserError(fmt::format("{}: equation term {} has {} labels but input {} has rank {}", node.describe(), i,
                                  letters, i, ranks[i]));
    ellipsisDims[i] = extra;
    eq.ellipsisRank = std::max(eq.ellipsisRank, extra);
  }
  std::map<int, int> occurrences;
  for (size_t i = 0; i < ranks.size(); ++i) {
    eq.inputs.push_back(expandTerm(p.inputs[i], ellipsisDims[i], eq.ellipsisRank));
    for (int l : eq.inputs.back()) ++occurrences[l];
  }
  if (p.output) {
    eq.output = expandTerm(*p.output, eq.ellipsisRank, eq.ellipsisRank);
    for (size_t i = 0; i < eq.output.size(); ++i) {
      if (!occurrences.count(eq.output[i]))
        throw UserError(fmt::format("{}: output label '{}' does not appear in any input", node.describe(),
                                    labelName(eq.output[i])));
      if (std::count(eq.output.begin(), eq.output.end(), eq.output[i]) > 1)
        throw UserError(fmt::format("{}: output repeats label '{}'", node.describe(), labelName(eq.output[i])));
    }
  } else {
    // Implicit mode: broadcast axes first, then labels seen exactly once, in alphabetical (ASCII) order.
    for (int e = 0; e < eq.ellipsisRank; ++e) eq.output.push_back(kEllipsisBase + e);
    for (const auto& [label, count] : occurrences)
      if (label < kEllipsisBase && count == 1) eq.output.push_back(label);
  }
  return eq;
}

/// Extent of every label; letters must agree exactly, ellipsis axes broadcast (1 stretches).
std::map<int, int64_t> labelSizes(const LabelledEquation& eq, const std::vector<Shape>& shapes, const Node& node) {
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < shapes.size(); ++i)
    for (size_t a = 0; a < shapes[i].size(); ++a) {
      int label = eq.inputs[i][a];
      int64_t extent = shapes[i][a];
      auto [it, fresh] = sizes.emplace(label, extent);
      if (fresh || it->second == extent) continue;
      if (label >= kEllipsisBase && (it->second == 1 || extent == 1)) {
        it->second = std::max(it->second, extent);
        continue;
      }
      throw UserError(fmt::format("{}: a label has extent {} in one place and {} in input {}", node.describe(),
                                  it->second, extent, i));
    }
  return sizes;
}

void inferEinsum(InferContext& ctx) {
  std::vector<int64_t> ranks;
  std::vector<Shape> shapes;
  bool allStatic = true;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const TensorType& t = ctx.inputType(i);
    if (t.dtype != ctx.inputType(0).dtype) ctx.fail("input {} has type {}, expected {}", i, dtypeName(t.dtype), dtypeName(ctx.inputType(0).dtype));
    if (!t.hasRank()) return ctx.setOutputType(0, TensorType(ctx.inputType(0).dtype, std::nullopt));
    ranks.push_back(static_cast<int64_t>(t.rank()));
    allStatic = allStatic && t.isStatic();
  }
  ParsedEquation p = parseEquation(ctx.node());
  LabelledEquation eq = labelEquation(p, ranks, ctx.node());
  // Label extents from whatever is known (symbols carried over when a label maps to one).
  std::map<int, Dim> dims;
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t a = 0; a < static_cast<size_t>(ranks[i]); ++a) {
      const Dim& d = (*ctx.inputType(i).dims)[a];
      int label = eq.inputs[i][a];
      auto it = dims.find(label);
      if (it == dims.end() || (!it->second.isKnown() && d.isKnown()) || (it->second.isKnown() && it->second.value == 1))
        dims[label] = d;
    }
  if (allStatic) {
    for (size_t i = 0; i < ranks.size(); ++i) shapes.push_back(ctx.inputType(i).staticShape());
    labelSizes(eq, shapes, ctx.node());
  }
  std::vector<Dim> out;
  for (int l : eq.output) out.push_back(dims.at(l));
  ctx.setOutputType(0, TensorType(ctx.inputType(0).dtype, out));
}

void einsumKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  std::vector<int64_t> ranks;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    shapes.push_back(ctx.input(i).shape());
    ranks.push_back(static_cast<int64_t>(shapes.back().size()));
    if (ctx.input(i).dtype() != ctx.input(0).dtype()) ctx.fail("all inputs must have the same element type");
  }
  LabelledEquation eq = labelEquation(parseEquation(node), ranks, node);
  std::map<int, int64_t> sizes = labelSizes(eq, shapes, node);
  // Loop order: output labels, then the summed ones.
  std::vector<int> loopLabels = eq.output;
  for (const auto& [label, size] : sizes)
    if (std::find(loopLabels.begin(), loopLabels.end(), label) == loopLabels.end()) loopLabels.push_back(label);
  std::vector<int64_t> extents;
  for (int l : loopLabels) extents.push_back(sizes.at(l));
  // Per input, the element stride along each loop label (repeated labels add up: a diagonal; broadcast 0).
  std::vector<std::vector<int64_t>> strides(ctx.numInputs(), std::vector<int64_t>(loopLabels.size(), 0));
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    std::vector<int64_t> own = contiguousStrides(shapes[i]);
    for (size_t a = 0; a < shapes[i].size(); ++a) {
      if (shapes[i][a] == 1 && sizes.at(eq.inputs[i][a]) != 1) continue;
      size_t k = std::find(loopLabels.begin(), loopLabels.end(), eq.inputs[i][a]) - loopLabels.begin();
      strides[i][k] += own[a];
    }
  }
  Shape outShape;
  for (int l : eq.output) outShape.push_back(sizes.at(l));
  std::vector<int64_t> outStrides(loopLabels.size(), 0), outOwn = contiguousStrides(outShape);
  for (size_t k = 0; k < eq.output.size(); ++k) outStrides[k] = outOwn[k];
  DType dt = ctx.input(0).dtype();
  Tensor& out = ctx.allocateOutput(0, dt, outShape);
  int64_t total = 1;
  for (int64_t e : extents) total *= e;
  dispatchNumeric(dt, node.describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;
    std::vector<const T*> in;
    for (size_t i = 0; i < ctx.numInputs(); ++i) in.push_back(ctx.input(i).template data<T>());
    std::vector<Acc> acc(out.numel(), Acc(0));
    std::vector<int64_t> idx(loopLabels.size(), 0), offsets(in.size(), 0);
    int64_t outOffset = 0;
    for (int64_t step = 0; step < total; ++step) {
      Acc product = 1;
      for (size_t i = 0; i < in.size(); ++i) product *= Acc(compute_t<T>(in[i][offsets[i]]));
      acc[outOffset] += product;
      for (size_t k = loopLabels.size(); k-- > 0;) {
        bool carry = ++idx[k] == extents[k];
        int64_t delta = carry ? -(extents[k] - 1) : 1;
        if (carry) idx[k] = 0;
        for (size_t i = 0; i < in.size(); ++i) offsets[i] += delta * strides[i][k];
        outOffset += delta * outStrides[k];
        if (!carry) break;
      }
    }
    T* y = out.data<T>();
    for (size_t o = 0; o < acc.size(); ++o) y[o] = T(static_cast<compute_t<T>>(acc[o]));
  });
}

}  // namespace

TESSEL_REGISTER_OP(Einsum) {
  return OpDef("Einsum")
      .inputs(1, kVariadic)
      .outputs(1)
      .since(12)
      .requiredAttr("equation", AttrKind::String)
      .describe("Einstein summation: products over shared labels, summed over labels absent from the output")
      .infer(inferEinsum)
      .kernel(einsumKernel)
      .cost([](const Node& n) {
        // Dense upper bound: one multiply-add per point of the full label space.
        Cost c = movementCost(n);
        try {
          std::vector<int64_t> ranks;
          std::vector<Shape> shapes;
          for (Value* v : n.inputs()) {
            if (!v || !v->type.isStatic()) return c;
            shapes.push_back(v->type.staticShape());
            ranks.push_back(static_cast<int64_t>(shapes.back().size()));
          }
          auto sizes = labelSizes(labelEquation(parseEquation(n), ranks, n), shapes, n);
          double points = 1;
          for (const auto& [label, size] : sizes) points *= static_cast<double>(size);
          c.flops = 2 * points;
        } catch (const UserError&) {
        }
        return c;
      });
}

}  // namespace tessel
