// Parser of the textual IR (.tir): recursive descent over the grammar in docs/ir.md; every error names FILE:LINE:COL.
#include <charconv>
#include <cmath>
#include <complex>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <set>

#include "tessel/ir/text.h"
#include "text_lexer.h"
#include "text_syntax.h"

namespace tessel {
namespace {

using textir::Lexer;
using textir::Tok;
using textir::Token;

/// Graph attributes nest recursively; bound the depth so hostile input cannot overflow the stack.
constexpr int kMaxGraphNesting = 64;

struct Loc {
  int line = 0;
  int col = 0;
};
Loc locOf(const Token& t) { return {t.line, t.col}; }

/// A use of a name that is resolved when its graph ends (forward references and captures).
struct PendingUse {
  Node* node;
  size_t index;
  std::string name;
  Loc loc;
};

/// One graph being parsed: where its names were defined and which uses still wait for a definition.
struct Scope {
  Graph* graph;
  std::map<std::string, Loc> definedAt;
  std::vector<PendingUse> pending;
};

/// A name with the place it was written (outputs and inputs of a node; "" stands for '_').
struct NameRef {
  std::string name;
  Loc loc;
};

bool isIntSpelling(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

class TextParser {
 public:
  TextParser(std::string_view text, const std::string& fileName, const textir::SideFileLoader& loader)
      : lex_(text, fileName), loader_(loader) {}

  std::unique_ptr<Model> parseModel() {
    expectKeyword("tessel.model", "'tessel.model' (the first word of a .tir file)");
    auto model = std::make_unique<Model>();
    parseModelHeader(*model);
    model->graph = parseGraph(nullptr);
    if (peek().kind != Tok::End) expected("end of input after the main graph");
    return model;
  }

 private:
  // ---------------------------------------------------------------- token helpers
  const Token& peek(size_t ahead = 0) { return lex_.peek(ahead); }
  [[noreturn]] void failAt(Loc loc, const std::string& message) { lex_.fail(loc.line, loc.col, message); }
  [[noreturn]] void expected(const std::string& what) {
    const Token& t = peek();
    failAt(locOf(t), fmt::format("expected {}, found {}", what, t.display()));
  }
  bool isKeyword(std::string_view word, size_t ahead = 0) {
    const Token& t = peek(ahead);
    return t.kind == Tok::Ident && t.text == word;
  }
  Token expect(Tok kind, const std::string& what) {
    if (peek().kind != kind) expected(what);
    return lex_.next();
  }
  void expectKeyword(std::string_view word, const std::string& what) {
    if (!isKeyword(word)) expected(what);
    lex_.next();
  }
  bool accept(Tok kind) {
    if (peek().kind != kind) return false;
    lex_.next();
    return true;
  }
  /// After a list element: true on ',', false on the closing token, an error otherwise.
  bool commaOr(Tok close, const std::string& closeText) {
    if (accept(Tok::Comma)) return true;
    if (accept(close)) return false;
    expected("',' or '" + closeText + "'");
  }

  template <class Int>
  Int parseInteger(const std::string& what) {
    const Token& t = peek();
    if (t.kind != Tok::Number || !isIntSpelling(t.text)) expected(what);
    std::string_view s = t.text;
    if (s[0] == '+') s.remove_prefix(1);
    Int v{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size())
      failAt(locOf(t), fmt::format("expected {}, found {} (out of range)", what, t.display()));
    lex_.next();
    return v;
  }

  // ---------------------------------------------------------------- model and graphs
  void parseModelHeader(Model& model) {
    while (!isKeyword("graph")) {
      if (isKeyword("opset")) {
        lex_.next();
        expect(Tok::LBrace, "'{' after 'opset'");
        if (!accept(Tok::RBrace)) {
          do {
            Token domain = expect(Tok::String, "a quoted opset domain like \"\"");
            expect(Tok::Colon, "':' after the opset domain");
            if (model.opsetImports.count(domain.text))
              failAt(locOf(domain), fmt::format("duplicate opset domain {}", domain.display()));
            model.opsetImports[domain.text] = parseInteger<int64_t>("an opset version");
          } while (commaOr(Tok::RBrace, "}"));
        }
      } else if (isKeyword("producer")) {
        lex_.next();
        model.producerName = expect(Tok::String, "a quoted producer name").text;
      } else if (isKeyword("ir_version")) {
        lex_.next();
        model.irVersion = parseInteger<int64_t>("an IR version number");
      } else if (isKeyword("side_file")) {
        lex_.next();
        sideFileName_ = expect(Tok::String, "a quoted side-file name").text;
      } else {
        expected("'opset', 'producer', 'ir_version', 'side_file' or 'graph'");
      }
    }
  }

  std::unique_ptr<Graph> parseGraph(Graph* parent) {
    if (static_cast<int>(scopes_.size()) >= kMaxGraphNesting)
      failAt(locOf(peek()), fmt::format("graphs nested deeper than {} levels", kMaxGraphNesting));
    expectKeyword("graph", "'graph'");
    Token name = expect(Tok::GlobalName, "a graph name like @main");
    auto g = std::make_unique<Graph>(name.text);
    g->setParent(parent);
    Scope scope{g.get(), {}, {}};
    scopes_.push_back(&scope);
    expect(Tok::LParen, "'(' and the graph inputs");
    if (!accept(Tok::RParen)) {
      do parseGraphInput(scope);
      while (commaOr(Tok::RParen, ")"));
    }
    expect(Tok::Arrow, "'->' and the graph outputs");
    expect(Tok::LParen, "'(' and the graph outputs");
    std::vector<std::pair<NameRef, TensorType>> outputs;
    if (!accept(Tok::RParen)) {
      do {
        Token out = expect(Tok::ValueName, "an output name like %y");
        expect(Tok::Colon, "':' and the output type");
        outputs.push_back({{out.text, locOf(out)}, parseType()});
      } while (commaOr(Tok::RParen, ")"));
    }
    expect(Tok::LBrace, "'{' and the graph body");
    while (!accept(Tok::RBrace)) parseStatement(scope);
    for (const PendingUse& use : scope.pending) use.node->setInput(use.index, resolve(scope, use.name, use.loc));
    for (const auto& [ref, type] : outputs) {
      Value* v = resolve(scope, ref.name, ref.loc);
      if (v->type == TensorType{}) v->type = type;  // hand-written text may type a value only here
      if (!(v->type == type))
        failAt(ref.loc, fmt::format("expected output %{} to have its defined type {}, found {}",
                                    textir::nameOrQuoted(ref.name), textir::typeToText(v->type),
                                    textir::typeToText(type)));
      g->addOutput(v);
    }
    scopes_.pop_back();
    return g;
  }

  /// A local definition, else an implicit capture of a value of an enclosing graph.
  Value* resolve(Scope& scope, const std::string& name, Loc loc) {
    if (Value* v = scope.graph->findValue(name)) return v;
    for (size_t i = scopes_.size() - 1; i-- > 0;) {
      if (Value* outer = scopes_[i]->graph->findValue(name)) {
        scope.definedAt[name] = loc;
        return scope.graph->addValue(name, outer->type);
      }
    }
    failAt(loc, fmt::format("undefined value %{} (expected a definition in this graph or an enclosing one)",
                            textir::nameOrQuoted(name)));
  }

  void define(Scope& scope, const std::string& name, Loc loc) {
    auto it = scope.definedAt.find(name);
    if (it != scope.definedAt.end())
      failAt(loc, fmt::format("duplicate definition of '%{}' (first defined at {}:{})", textir::nameOrQuoted(name),
                              it->second.line, it->second.col));
    scope.definedAt[name] = loc;
  }
  void define(Scope& scope, const Token& nameTok) { define(scope, nameTok.text, locOf(nameTok)); }

  void parseGraphInput(Scope& scope) {
    Token name = expect(Tok::ValueName, "an input name like %x");
    define(scope, name);
    expect(Tok::Colon, "':' and the input type");
    TensorType type = parseType();
    Value* v = scope.graph->addInput(name.text, type);
    if (accept(Tok::Equals)) {
      v->setConstant(parseConstantData(type));
      v->type = type;  // keep the declared type even where it is more general than the data
    }
  }

  void parseStatement(Scope& scope) {
    const Token& t = peek();
    if (isKeyword("const") && peek(1).kind == Tok::ValueName) return parseConst(scope);
    if (isKeyword("capture") && peek(1).kind == Tok::ValueName) return parseCapture(scope);
    bool outputsFirst = t.kind == Tok::ValueName || (isKeyword("_") && peek(1).kind != Tok::LParen);
    bool opFirst = (t.kind == Tok::Ident || t.kind == Tok::String);
    if (!outputsFirst && !opFirst) expected("a statement ('const', 'capture', '%y = Op(...)') or '}'");
    parseNode(scope, outputsFirst);
  }

  void parseConst(Scope& scope) {
    lex_.next();
    Token name = lex_.next();
    define(scope, name);
    expect(Tok::Colon, "':' and the constant's type");
    TensorType type = parseType();
    expect(Tok::Equals, "'=' and the constant's data");
    Value* v = scope.graph->addConstant(name.text, parseConstantData(type));
    v->type = type;
  }

  void parseCapture(Scope& scope) {
    lex_.next();
    Token name = lex_.next();
    define(scope, name);
    expect(Tok::Colon, "':' and the captured value's type");
    scope.graph->addValue(name.text, parseType());
  }

  // ---------------------------------------------------------------- nodes
  std::pair<std::string, std::string> parseOpName() {
    Token t = lex_.next();
    if (t.kind == Tok::Ident) {
      size_t dot = t.text.rfind('.');
      if (dot == std::string::npos) return {"", t.text};
      if (dot == 0 || dot + 1 == t.text.size())
        failAt(locOf(t), fmt::format("expected an operator name like Conv or com.microsoft.Gelu, found {}", t.display()));
      return {t.text.substr(0, dot), t.text.substr(dot + 1)};
    }
    if (t.kind == Tok::String) {
      if (!accept(Tok::Colon)) return {"", t.text};
      return {t.text, expect(Tok::String, "a quoted operator type after the quoted domain and ':'").text};
    }
    failAt(locOf(t), fmt::format("expected an operator name, found {}", t.display()));
  }

  std::vector<NameRef> parseNameList(Tok close, const std::string& what) {
    std::vector<NameRef> names;
    do {
      const Token& t = peek();
      if (t.kind == Tok::ValueName) names.push_back({t.text, locOf(t)});
      else if (isKeyword("_")) names.push_back({"", locOf(t)});
      else expected(what);
      lex_.next();
    } while (peek().kind == Tok::Comma && (lex_.next(), true));
    if (close != Tok::End && !accept(close)) expected("',' or ')'");
    return names;
  }

  void parseNode(Scope& scope, bool hasOutputs) {
    std::vector<NameRef> outputs;
    if (hasOutputs) {
      outputs = parseNameList(Tok::End, "an output name like %y or '_'");
      expect(Tok::Equals, "',' or '=' after the node outputs");
    }
    auto [domain, opType] = parseOpName();
    expect(Tok::LParen, "'(' and the operator inputs");
    std::vector<NameRef> inputs;
    if (!accept(Tok::RParen)) inputs = parseNameList(Tok::RParen, "an input name like %x or '_'");
    std::map<std::string, AttrValue> attrs;
    if (peek().kind == Tok::LBrace) parseAttrDict(attrs, scope.graph);
    std::vector<TensorType> types;
    Loc typesLoc = locOf(peek());
    if (accept(Tok::Colon)) {
      do types.push_back(parseType());
      while (accept(Tok::Comma));
    }
    std::string device, name;
    bool named = false;
    std::map<std::string, AttrValue> meta;
    while (true) {
      if (peek().kind == Tok::GlobalName) {
        device = lex_.next().text;
      } else if (isKeyword("meta") && peek(1).kind == Tok::LBrace) {
        lex_.next();
        parseAttrDict(meta, scope.graph);
      } else if (isKeyword("name") && peek(1).kind == Tok::String) {
        lex_.next();
        name = lex_.next().text;
        named = true;
      } else {
        break;
      }
    }
    std::vector<std::string> outputNames;
    size_t present = 0;
    for (const NameRef& o : outputs) {
      outputNames.push_back(o.name);
      if (o.name.empty()) continue;
      ++present;
      define(scope, o.name, o.loc);
    }
    if (!types.empty() && types.size() != present)
      failAt(typesLoc, fmt::format("expected {} output type(s), one per output that is not '_', found {}", present,
                                   types.size()));
    Node* node = scope.graph->addNode(opType, {}, outputNames, "", domain);
    if (named) node->setName(name);
    for (size_t i = 0, t = 0; i < node->numOutputs() && !types.empty(); ++i)
      if (node->output(i)) node->output(i)->type = types[t++];
    for (const NameRef& in : inputs) {
      Value* v = in.name.empty() ? nullptr : scope.graph->findValue(in.name);
      if (!in.name.empty() && !v) scope.pending.push_back({node, node->numInputs(), in.name, in.loc});
      node->addInput(v);
    }
    for (auto& [k, v] : attrs) node->setAttr(k, std::move(v));
    node->device = device;
    node->meta = std::move(meta);
  }

  // ---------------------------------------------------------------- types
  TensorType parseType() {
    TensorType type;
    const Token& t = peek();
    if (t.kind == Tok::Question) {
      lex_.next();
      if (peek().kind != Tok::LBracket) return type;
    } else {
      if (t.kind != Tok::Ident || t.text == "undef" || parseDType(t.text) == DType::Undefined)
        expected("a type like f32[1,3] (element types: f32 f16 bf16 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool str "
                 "c64 c128, or ? when unknown)");
      type.dtype = parseDType(lex_.next().text);
    }
    expect(Tok::LBracket, "'[' and the dimensions ('[*]' for an unknown rank)");
    if (accept(Tok::Star)) {
      expect(Tok::RBracket, "']' after '*'");
      return type;
    }
    type.dims.emplace();
    if (accept(Tok::RBracket)) return type;
    do {
      const Token& d = peek();
      if (d.kind == Tok::Number) {
        Loc loc = locOf(d);
        int64_t extent = parseInteger<int64_t>("a dimension (an integer >= 0)");
        if (extent < 0) failAt(loc, fmt::format("expected a dimension >= 0, found {}", extent));
        type.dims->push_back(Dim::known(extent));
      } else if (d.kind == Tok::Question) {
        lex_.next();
        type.dims->push_back(Dim::unknown());
      } else if (d.kind == Tok::Ident || d.kind == Tok::String) {
        type.dims->push_back(Dim::symbolic(lex_.next().text));
      } else {
        expected("a dimension (a number, a symbol like N, or ?)");
      }
    } while (commaOr(Tok::RBracket, "]"));
    return type;
  }

  // ---------------------------------------------------------------- tensors
  Tensor parseConstantData(const TensorType& declared) {
    if (isKeyword("tensor")) return parseTensorLiteral();
    if (declared.dtype == DType::Undefined || !declared.isStatic())
      expected(fmt::format("'tensor <type> <data>' (the declared type {} is not static)", textir::typeToText(declared)));
    return parseTensorData(declared.dtype, declared.staticShape());
  }

  Tensor parseTensorLiteral() {
    expectKeyword("tensor", "'tensor'");
    Loc loc = locOf(peek());
    TensorType type = parseType();
    if (type.dtype == DType::Undefined || !type.isStatic())
      failAt(loc, fmt::format("expected a tensor type with a known element type and static shape, found {}",
                              textir::typeToText(type)));
    return parseTensorData(type.dtype, type.staticShape());
  }

  int64_t checkedElementCount(DType dtype, const Shape& shape, Loc loc) {
    int64_t n = 1;
    for (int64_t d : shape)
      if (__builtin_mul_overflow(n, d, &n))
        failAt(loc, fmt::format("expected a tensor size that fits in 64 bits, found shape {}", shapeToString(shape)));
    size_t bytes;
    if (__builtin_mul_overflow(static_cast<size_t>(n), dtypeSize(dtype), &bytes))
      failAt(loc, fmt::format("expected a tensor size that fits in memory, found shape {}", shapeToString(shape)));
    return n;
  }

  Tensor parseTensorData(DType dtype, const Shape& shape) {
    Loc loc = locOf(peek());
    std::string typeText = TensorType::fromShape(dtype, shape).toString();
    int64_t numel = checkedElementCount(dtype, shape, loc);
    if (peek().kind == Tok::GlobalName && peek().text == "side") return parseSideReference(dtype, shape, numel);
    if (peek().kind != Tok::LBracket) {
      if (numel != 1) expected(fmt::format("'[' and {} elements for {}", numel, typeText));
      Tensor t(dtype, shape);
      parseElement(t, 0);
      return t;
    }
    lex_.next();
    // Every inline element takes at least one character, which bounds the allocation by the text size.
    if (static_cast<uint64_t>(numel) > lex_.textSize())
      failAt(loc, fmt::format("expected {} elements for {}, more than this file can hold", numel, typeText));
    Tensor t(dtype, shape);
    int64_t count = 0;
    if (peek().kind != Tok::RBracket) {
      do {
        if (count == numel) expected(fmt::format("']' after {} elements of {}", numel, typeText));
        parseElement(t, count++);
      } while (accept(Tok::Comma));
    }
    if (peek().kind != Tok::RBracket) expected("',' or ']'");
    if (count != numel) failAt(locOf(peek()), fmt::format("expected {} elements for {}, found {}", numel, typeText, count));
    lex_.next();
    return t;
  }

  Tensor parseSideReference(DType dtype, const Shape& shape, int64_t numel);
  void parseElement(Tensor& t, int64_t i);
  std::string floatSpelling(std::optional<uint64_t>& nanBits, unsigned bitWidth, std::string_view dtype);
  template <class F>
  F parseFloatElement(std::string_view dtype);
  template <class Half>
  Half parseHalfElement(std::string_view dtype);
  template <class Int>
  Int parseIntElement(std::string_view dtype);

  // ---------------------------------------------------------------- attributes
  void parseAttrDict(std::map<std::string, AttrValue>& attrs, Graph* owner);
  AttrValue parseAttrValue(Graph* owner);
  AttrValue parseAttrList(Graph* owner);

  Lexer lex_;
  const textir::SideFileLoader& loader_;
  std::string sideFileName_;
  std::optional<std::optional<std::string_view>> side_;  ///< outer: loaded yet; inner: found
  std::vector<Scope*> scopes_;
};

Tensor TextParser::parseSideReference(DType dtype, const Shape& shape, int64_t numel) {
  Token at = lex_.next();
  expect(Tok::LParen, "'(' after @side");
  expectKeyword("offset", "'offset'");
  expect(Tok::Equals, "'=' after 'offset'");
  auto offset = parseInteger<uint64_t>("a byte offset");
  expect(Tok::Comma, "',' after the offset");
  expectKeyword("bytes", "'bytes'");
  expect(Tok::Equals, "'=' after 'bytes'");
  Loc bytesLoc = locOf(peek());
  auto bytes = parseInteger<uint64_t>("a byte count");
  expect(Tok::RParen, "')' after the side-file reference");
  std::string typeText = TensorType::fromShape(dtype, shape).toString();
  if (dtype == DType::String) failAt(locOf(at), "expected inline data for a str tensor, found a side-file reference");
  uint64_t want = static_cast<uint64_t>(numel) * dtypeSize(dtype);
  if (bytes != want) failAt(bytesLoc, fmt::format("expected bytes={} for {}, found {}", want, typeText, bytes));
  if (!side_) side_ = loader_(sideFileName_);
  if (!*side_)
    failAt(locOf(at), fmt::format("side file '{}' not found (expected next to {}; this constant is stored there)",
                                  sideFileName_.empty() ? lex_.fileName() + ".bin" : sideFileName_, lex_.fileName()));
  std::string_view side = **side_;
  if (offset > side.size() || bytes > side.size() - offset)
    failAt(locOf(at), fmt::format("side-file range [{}, {}+{}) is out of range: the side file has {} bytes", offset,
                                  offset, bytes, side.size()));
  Tensor t(dtype, shape);
  std::memcpy(t.rawData(), side.data() + offset, bytes);
  if (dtype == DType::Bool) {
    const auto* raw = static_cast<const unsigned char*>(t.rawData());
    for (uint64_t i = 0; i < bytes; ++i)
      if (raw[i] > 1)
        failAt(locOf(at), fmt::format("expected bool bytes 0 or 1 in the side file, found {} at offset {}", raw[i],
                                      offset + i));
  }
  return t;
}

std::string TextParser::floatSpelling(std::optional<uint64_t>& nanBits, unsigned bitWidth, std::string_view dtype) {
  const Token& t = peek();
  bool word = t.kind == Tok::Ident && (t.text == "nan" || t.text == "inf");
  if (t.kind != Tok::Number && !word) expected(fmt::format("a {} number", dtype));
  std::string spelling = lex_.next().text;
  if (spelling == "nan" && peek().kind == Tok::LParen) {
    lex_.next();
    const Token& b = peek();
    uint64_t bits = 0;
    bool ok = b.kind == Tok::Number && b.text.size() > 2 && b.text[0] == '0' && (b.text[1] == 'x' || b.text[1] == 'X');
    if (ok) {
      auto [end, ec] = std::from_chars(b.text.data() + 2, b.text.data() + b.text.size(), bits, 16);
      ok = ec == std::errc() && end == b.text.data() + b.text.size() && (bitWidth == 64 || bits >> bitWidth == 0);
    }
    if (!ok) expected(fmt::format("the {}-bit pattern of a {} NaN in hex, like 0x7fc00001", bitWidth, dtype));
    lex_.next();
    expect(Tok::RParen, "')' after the NaN bit pattern");
    nanBits = bits;
  }
  return spelling;
}

template <class F>
F TextParser::parseFloatElement(std::string_view dtype) {
  Loc loc = locOf(peek());
  std::optional<uint64_t> bits;
  std::string s = floatSpelling(bits, sizeof(F) * 8, dtype);
  F v;
  if (bits) {
    if constexpr (sizeof(F) == 4) {
      auto b32 = static_cast<uint32_t>(*bits);
      std::memcpy(&v, &b32, 4);
    } else {
      std::memcpy(&v, &*bits, 8);
    }
    return v;
  }
  char* end = nullptr;
  if constexpr (sizeof(F) == 4) v = std::strtof(s.c_str(), &end);
  else v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) failAt(loc, fmt::format("expected a {} number, found '{}'", dtype, s));
  return v;
}

template <class Half>
Half TextParser::parseHalfElement(std::string_view dtype) {
  Loc loc = locOf(peek());
  std::optional<uint64_t> bits;
  std::string s = floatSpelling(bits, 16, dtype);
  if (bits) return Half::fromBits(static_cast<uint16_t>(*bits));
  char* end = nullptr;
  float f = std::strtof(s.c_str(), &end);
  if (end != s.c_str() + s.size()) failAt(loc, fmt::format("expected a {} number, found '{}'", dtype, s));
  return Half(f);
}

template <class Int>
Int TextParser::parseIntElement(std::string_view dtype) {
  Loc loc = locOf(peek());
  std::string what = fmt::format("a {} integer", dtype);
  if constexpr (std::is_same_v<Int, uint64_t>) {
    return parseInteger<uint64_t>(what);
  } else {
    int64_t v = parseInteger<int64_t>(what);
    if (v < static_cast<int64_t>(std::numeric_limits<Int>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<Int>::max()))
      failAt(loc, fmt::format("expected {} in [{}, {}], found {}", what, std::numeric_limits<Int>::min() + 0,
                              std::numeric_limits<Int>::max() + 0, v));
    return static_cast<Int>(v);
  }
}

void TextParser::parseElement(Tensor& t, int64_t i) {
  std::string_view dt = dtypeName(t.dtype());
  switch (t.dtype()) {
    case DType::Float32: t.data<float>()[i] = parseFloatElement<float>(dt); return;
    case DType::Float64: t.data<double>()[i] = parseFloatElement<double>(dt); return;
    case DType::Float16: t.data<float16>()[i] = parseHalfElement<float16>(dt); return;
    case DType::BFloat16: t.data<bfloat16>()[i] = parseHalfElement<bfloat16>(dt); return;
    case DType::Int8: t.data<int8_t>()[i] = parseIntElement<int8_t>(dt); return;
    case DType::Int16: t.data<int16_t>()[i] = parseIntElement<int16_t>(dt); return;
    case DType::Int32: t.data<int32_t>()[i] = parseIntElement<int32_t>(dt); return;
    case DType::Int64: t.data<int64_t>()[i] = parseIntElement<int64_t>(dt); return;
    case DType::UInt8: t.data<uint8_t>()[i] = parseIntElement<uint8_t>(dt); return;
    case DType::UInt16: t.data<uint16_t>()[i] = parseIntElement<uint16_t>(dt); return;
    case DType::UInt32: t.data<uint32_t>()[i] = parseIntElement<uint32_t>(dt); return;
    case DType::UInt64: t.data<uint64_t>()[i] = parseIntElement<uint64_t>(dt); return;
    case DType::Bool:
      if (!isKeyword("true") && !isKeyword("false")) expected("a bool element (true or false)");
      t.data<bool>()[i] = lex_.next().text == "true";
      return;
    case DType::String: t.data<std::string>()[i] = expect(Tok::String, "a quoted string element").text; return;
    case DType::Complex64:
    case DType::Complex128: {
      expect(Tok::LParen, fmt::format("a {} element like (1.5, -2)", dt));
      bool narrow = t.dtype() == DType::Complex64;
      double re = narrow ? parseFloatElement<float>(dt) : parseFloatElement<double>(dt);
      expect(Tok::Comma, "',' between the real and imaginary parts");
      double im = narrow ? parseFloatElement<float>(dt) : parseFloatElement<double>(dt);
      expect(Tok::RParen, "')' after the imaginary part");
      if (narrow) t.data<std::complex<float>>()[i] = {static_cast<float>(re), static_cast<float>(im)};
      else t.data<std::complex<double>>()[i] = {re, im};
      return;
    }
    default: TESSEL_ASSERT(false, "parseElement: undefined dtype");
  }
}

// ---------------------------------------------------------------- attributes

void TextParser::parseAttrDict(std::map<std::string, AttrValue>& attrs, Graph* owner) {
  expect(Tok::LBrace, "'{'");
  if (accept(Tok::RBrace)) return;
  do {
    const Token& k = peek();
    if (k.kind != Tok::Ident && k.kind != Tok::String) expected("an attribute name");
    Token key = lex_.next();
    if (attrs.count(key.text)) failAt(locOf(key), fmt::format("duplicate attribute {}", key.display()));
    expect(Tok::Equals, "'=' after the attribute name");
    attrs[key.text] = parseAttrValue(owner);
  } while (commaOr(Tok::RBrace, "}"));
}

AttrValue TextParser::parseAttrValue(Graph* owner) {
  const Token& t = peek();
  if (t.kind == Tok::Number && isIntSpelling(t.text)) return parseInteger<int64_t>("an integer");
  if (t.kind == Tok::Number || isKeyword("nan") || isKeyword("inf")) return parseFloatElement<float>("float");
  if (t.kind == Tok::String) return lex_.next().text;
  if (isKeyword("tensor")) return parseTensorLiteral();
  if (isKeyword("graph")) return std::shared_ptr<Graph>(parseGraph(owner));
  if (t.kind == Tok::LBracket) return parseAttrList(owner);
  static const std::map<std::string, AttrValue> kEmptyLists = {
      {"ints", std::vector<int64_t>{}},   {"floats", std::vector<float>{}},   {"strings", std::vector<std::string>{}},
      {"tensors", std::vector<Tensor>{}}, {"graphs", std::vector<std::shared_ptr<Graph>>{}}};
  if (t.kind == Tok::Ident && kEmptyLists.count(t.text) && peek(1).kind == Tok::LBracket &&
      peek(2).kind == Tok::RBracket) {
    AttrValue v = kEmptyLists.at(lex_.next().text);
    lex_.next();
    lex_.next();
    return v;
  }
  expected("an attribute value (integer, float, string, tensor, graph, or a list like [1, 2] or ints[])");
}

AttrValue TextParser::parseAttrList(Graph* owner) {
  expect(Tok::LBracket, "'['");
  const Token& first = peek();  // only valid until the next token is consumed
  const Loc firstLoc = locOf(first);
  if (first.kind == Tok::RBracket)
    expected("a list element (write an empty list with its kind: ints[], floats[], strings[], tensors[], graphs[])");
  if (first.kind == Tok::String) {
    std::vector<std::string> out;
    do out.push_back(expect(Tok::String, "a quoted string (this list holds strings)").text);
    while (commaOr(Tok::RBracket, "]"));
    return out;
  }
  if (isKeyword("tensor")) {
    std::vector<Tensor> out;
    do out.push_back(parseTensorLiteral());
    while (commaOr(Tok::RBracket, "]"));
    return out;
  }
  if (isKeyword("graph")) {
    std::vector<std::shared_ptr<Graph>> out;
    do out.push_back(parseGraph(owner));
    while (commaOr(Tok::RBracket, "]"));
    return out;
  }
  // Numbers: ints when every element is written as an integer, floats otherwise.
  std::vector<AttrValue> items;
  bool allInts = true;
  do {
    AttrValue v = parseAttrValue(owner);
    if (attrKindOf(v) != AttrKind::Int && attrKindOf(v) != AttrKind::Float)
      failAt(firstLoc, "expected a list of numbers, strings, tensors or graphs, found mixed kinds");
    allInts = allInts && attrKindOf(v) == AttrKind::Int;
    items.push_back(std::move(v));
  } while (commaOr(Tok::RBracket, "]"));
  if (allInts) {
    std::vector<int64_t> out;
    for (const AttrValue& v : items) out.push_back(std::get<int64_t>(v));
    return out;
  }
  std::vector<float> out;
  for (const AttrValue& v : items)
    out.push_back(attrKindOf(v) == AttrKind::Int ? static_cast<float>(std::get<int64_t>(v)) : std::get<float>(v));
  return out;
}

}  // namespace

namespace textir {
std::unique_ptr<Model> parseModelTextWithLoader(std::string_view text, const std::string& fileName,
                                                const SideFileLoader& loader) {
  return TextParser(text, fileName, loader).parseModel();
}
}  // namespace textir

std::unique_ptr<Model> parseModelText(std::string_view text, const std::string& fileName, std::string_view sideData) {
  textir::SideFileLoader loader = [&](const std::string&) -> std::optional<std::string_view> {
    if (sideData.empty()) return std::nullopt;
    return sideData;
  };
  return textir::parseModelTextWithLoader(text, fileName, loader);
}

}  // namespace tessel
