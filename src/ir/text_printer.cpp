// Printer of the textual IR (.tir): models, graphs, nodes, types, attributes and constants (docs/ir.md).
#include <algorithm>
#include <complex>
#include <cstring>
#include <fmt/format.h>

#include "tessel/ir/text.h"
#include "text_syntax.h"

namespace tessel {
namespace {

using textir::formatDouble;
using textir::formatFloat;
using textir::nameOrQuoted;
using textir::quoteString;

/// Side-file chunks start at multiples of this (lets a reader map them with aligned loads).
constexpr size_t kSideAlignment = 64;
/// Inline tensor data wraps after this many elements per line.
constexpr int64_t kElementsPerLine = 16;

/// Prefixes a sigil without `"x" + std::string` (GCC 12 reports a false -Wrestrict on that form).
std::string sigil(char c, std::string_view rest) {
  std::string s(1, c);
  s += rest;
  return s;
}

std::string valueRef(const Value* v) { return v ? sigil('%', nameOrQuoted(v->name())) : "_"; }

using textir::typeToText;

std::string tensorTypeText(const Tensor& t) { return typeToText(TensorType::fromShape(t.dtype(), t.shape())); }

/// "Op", "com.microsoft.Op", or the quoted form "domain":"Op" when a part is not an identifier.
std::string opText(const Node& n) {
  bool plain = textir::isIdentifier(n.opType());
  if (!n.domain().empty()) {
    size_t start = 0;
    while (plain) {
      size_t dot = n.domain().find('.', start);
      std::string_view part = std::string_view(n.domain()).substr(start, dot == std::string::npos ? dot : dot - start);
      plain = textir::isIdentifier(part);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
  if (plain) return n.domain().empty() ? n.opType() : n.domain() + "." + n.opType();
  return n.domain().empty() ? quoteString(n.opType()) : quoteString(n.domain()) + ":" + quoteString(n.opType());
}

std::string attrKey(const std::string& k) { return textir::isIdentifier(k) ? k : quoteString(k); }

/// The node name the parser gives a node that has no `name` clause (mirrors Graph::addNode's default).
std::string defaultNodeName(const Node& n) {
  return n.numOutputs() == 0 || !n.output(0) ? n.opType() : n.output(0)->name();
}

template <class Half>
std::string halfText(Half h, uint16_t canonicalNan) {
  float f = h;
  if (f != f && h.bits != canonicalNan) return fmt::format("nan(0x{:04x})", h.bits);
  return formatFloat(f, false);
}

std::string elementText(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float32: return formatFloat(t.data<float>()[i], false);
    case DType::Float64: return formatDouble(t.data<double>()[i], false);
    case DType::Float16: return halfText(t.data<float16>()[i], 0x7e00);
    case DType::BFloat16: return halfText(t.data<bfloat16>()[i], 0x7fc0);
    case DType::Bool: return t.data<bool>()[i] ? "true" : "false";
    case DType::String: return quoteString(t.data<std::string>()[i]);
    case DType::Complex64: {
      auto c = t.data<std::complex<float>>()[i];
      return fmt::format("({}, {})", formatFloat(c.real(), false), formatFloat(c.imag(), false));
    }
    case DType::Complex128: {
      auto c = t.data<std::complex<double>>()[i];
      return fmt::format("({}, {})", formatDouble(c.real(), false), formatDouble(c.imag(), false));
    }
    case DType::UInt64: return std::to_string(t.data<uint64_t>()[i]);
    default:
      return dispatchNumeric(t.dtype(), "text IR", [&](auto tag) -> std::string {
        using T = typename decltype(tag)::type;
        return std::to_string(static_cast<int64_t>(t.data<T>()[i]));
      });
  }
}

class TextPrinter {
 public:
  TextPrinter(const TextPrintOptions& options, std::string* sideData, bool elideLarge)
      : options_(options), sideData_(sideData), elideLarge_(elideLarge) {}

  bool usedSideFile() const { return usedSideFile_; }

  void printGraph(const Graph& g, int indent) {
    out_ += "graph @" + nameOrQuoted(g.name()) + "(";
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const Value* in = g.inputs()[i];
      if (i) out_ += ", ";
      out_ += valueRef(in) + ": " + typeToText(in->type);
      if (in->isConstant()) out_ += " = " + constantData(*in, indent);
    }
    out_ += ") -> (";
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      if (i) out_ += ", ";
      out_ += valueRef(g.outputs()[i]) + ": " + typeToText(g.outputs()[i]->type);
    }
    out_ += ") {\n";
    std::string pad(static_cast<size_t>(indent + 2), ' ');
    for (const Value* v : g.values()) {
      if (v->isCaptured()) out_ += pad + "capture " + valueRef(v) + ": " + typeToText(v->type) + "\n";
    }
    for (const Value* v : g.values()) {
      if (!v->isConstant() || v->isGraphInput() || v->producer()) continue;
      out_ += pad + "const " + valueRef(v) + ": " + typeToText(v->type) + " = " + constantData(*v, indent + 2) + "\n";
    }
    for (const auto& n : g.nodes()) printNode(*n, indent + 2);
    out_ += std::string(static_cast<size_t>(indent), ' ') + "}";
  }

  std::string take() { return std::move(out_); }

 private:
  void printNode(const Node& n, int indent) {
    out_ += std::string(static_cast<size_t>(indent), ' ');
    if (n.numOutputs() > 0) {
      for (size_t i = 0; i < n.numOutputs(); ++i) (out_ += i ? ", " : "") += valueRef(n.output(i));
      out_ += " = ";
    }
    out_ += opText(n) + "(";
    for (size_t i = 0; i < n.numInputs(); ++i) (out_ += i ? ", " : "") += valueRef(n.input(i));
    out_ += ")";
    if (!n.attrs().empty()) (out_ += " ") += attrDict(n.attrs(), indent);
    bool first = true;
    for (const Value* o : n.outputs()) {
      if (!o) continue;
      (out_ += first ? " : " : ", ") += typeToText(o->type);
      first = false;
    }
    if (!n.device.empty()) (out_ += "  @") += nameOrQuoted(n.device);
    if (!n.meta.empty()) (out_ += "  meta") += attrDict(n.meta, indent);
    if (n.name() != defaultNodeName(n)) (out_ += "  name ") += quoteString(n.name());
    out_ += "\n";
  }

  std::string attrDict(const std::map<std::string, AttrValue>& attrs, int indent) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, v] : attrs) {
      s += (first ? "" : ", ") + attrKey(k) + "=" + attrValue(v, indent);
      first = false;
    }
    return s + "}";
  }

  std::string graphText(const Graph& g, int indent) {
    // Nested graphs print into the same buffer; swap it out so the attribute text composes.
    std::string saved = std::move(out_);
    out_.clear();
    printGraph(g, indent);
    std::string s = std::move(out_);
    out_ = std::move(saved);
    return s;
  }

  template <class T, class Fn>
  static std::string listText(const std::vector<T>& items, std::string_view kind, Fn&& one) {
    if (items.empty()) return std::string(kind) + "[]";
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + one(items[i]);
    return s + "]";
  }

  std::string attrValue(const AttrValue& v, int indent) {
    switch (attrKindOf(v)) {
      case AttrKind::Int: return std::to_string(std::get<int64_t>(v));
      case AttrKind::Float: return formatFloat(std::get<float>(v), true);
      case AttrKind::String: return quoteString(std::get<std::string>(v));
      case AttrKind::Tensor: return tensorLiteral(std::get<Tensor>(v), indent);
      case AttrKind::Graph: return graphText(*std::get<std::shared_ptr<Graph>>(v), indent);
      case AttrKind::Ints:
        return listText(std::get<std::vector<int64_t>>(v), "ints", [](int64_t x) { return std::to_string(x); });
      case AttrKind::Floats:
        return listText(std::get<std::vector<float>>(v), "floats", [](float x) { return formatFloat(x, true); });
      case AttrKind::Strings:
        return listText(std::get<std::vector<std::string>>(v), "strings",
                        [](const std::string& x) { return quoteString(x); });
      case AttrKind::Tensors:
        return listText(std::get<std::vector<Tensor>>(v), "tensors",
                        [&](const Tensor& x) { return tensorLiteral(x, indent); });
      case AttrKind::Graphs:
        return listText(std::get<std::vector<std::shared_ptr<Graph>>>(v), "graphs",
                        [&](const std::shared_ptr<Graph>& g) { return graphText(*g, indent); });
    }
    TESSEL_ASSERT(false, "unknown attribute kind");
    return {};
  }

  /// Data shaped by the value's declared type, or a full tensor literal when the two disagree.
  std::string constantData(const Value& v, int indent) {
    const Tensor& t = v.constant();
    if (v.type == TensorType::fromShape(t.dtype(), t.shape())) return tensorData(t, indent);
    return tensorLiteral(t, indent);
  }

  std::string tensorLiteral(const Tensor& t, int indent) {
    return "tensor " + tensorTypeText(t) + " " + tensorData(t, indent);
  }

  /// Inline elements, a side-file reference, or (graph dumps) an elision.
  std::string tensorData(const Tensor& t, int indent) {
    bool large = t.numel() > options_.inlineLimit && t.dtype() != DType::String;
    if (large && elideLarge_) return fmt::format("<{} bytes>", t.nbytes());
    if (large && sideData_) return sideReference(t);
    if (t.rank() == 0) return elementText(t, 0);
    std::string s = "[";
    std::string wrapPad = sigil('\n', std::string(static_cast<size_t>(indent + 4), ' '));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) s += ",";
      if (t.numel() > kElementsPerLine && i % kElementsPerLine == 0) s += wrapPad;
      else if (i) s += " ";
      s += elementText(t, i);
    }
    return s + "]";
  }

  std::string sideReference(const Tensor& t) {
    size_t offset = (sideData_->size() + kSideAlignment - 1) / kSideAlignment * kSideAlignment;
    sideData_->resize(offset, '\0');
    sideData_->append(static_cast<const char*>(t.rawData()), t.nbytes());
    usedSideFile_ = true;
    return fmt::format("@side(offset={}, bytes={})", offset, t.nbytes());
  }

  const TextPrintOptions& options_;
  std::string* sideData_;
  bool elideLarge_;
  bool usedSideFile_ = false;
  std::string out_;
};

}  // namespace

std::string printModelText(const Model& model, const TextPrintOptions& options, std::string* sideData,
                           const std::string& sideFileName) {
  TESSEL_ASSERT(model.graph, "printModelText: model without a graph");
  TextPrinter printer(options, sideData, false);
  printer.printGraph(*model.graph, 0);
  std::string header = "tessel.model opset{";
  bool first = true;
  for (const auto& [domain, version] : model.opsetImports) {
    header += fmt::format("{}{}: {}", first ? "" : ", ", quoteString(domain), version);
    first = false;
  }
  header += "} producer " + quoteString(model.producerName) + " ir_version " + std::to_string(model.irVersion);
  if (printer.usedSideFile() && !sideFileName.empty()) header += " side_file " + quoteString(sideFileName);
  return header + "\n" + printer.take() + "\n";
}

std::string printGraphText(const Graph& graph) {
  TextPrintOptions options;
  TextPrinter printer(options, nullptr, true);
  printer.printGraph(graph, 0);
  return printer.take() + "\n";
}

}  // namespace tessel
