// Lexical conventions of the textual IR: which names need quotes, string escapes, exact float spelling.
#include "text_syntax.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>

#include "tessel/ir/type.h"

namespace tessel::textir {

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

bool isPlainName(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!isNameChar(c)) return false;
  return true;
}

bool isIdentifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!isNameChar(c) || c == '.') return false;
  return true;
}

bool isReservedWord(std::string_view s) {
  // Words that mean something where a dimension symbol, attribute value or number may stand.
  return s == "nan" || s == "inf" || s == "true" || s == "false" || s == "graph" || s == "tensor" || s == "_";
}

std::string quoteString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        // Bytes >= 0x80 stay raw so UTF-8 names remain readable; other control bytes are escaped.
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += ch;
    }
  }
  out += '"';
  return out;
}

std::string nameOrQuoted(std::string_view s) { return isPlainName(s) ? std::string(s) : quoteString(s); }

namespace {
/// Adds ".0" to an integral-looking spelling ("1" -> "1.0", "1e+20" stays) so it reads as a float.
std::string markFloat(std::string s) {
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string formatFloat(float v, bool markAsFloat) {
  if (std::isnan(v)) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits == kCanonicalNanF32 ? "nan" : fmt::format("nan(0x{:08x})", bits);
  }
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{:.9g}", v);
  return markAsFloat ? markFloat(std::move(s)) : s;
}

std::string formatDouble(double v, bool markAsFloat) {
  if (std::isnan(v)) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    return bits == kCanonicalNanF64 ? "nan" : fmt::format("nan(0x{:016x})", bits);
  }
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{:.17g}", v);
  return markAsFloat ? markFloat(std::move(s)) : s;
}

namespace {
std::string dimText(const Dim& d) {
  if (d.isKnown()) return std::to_string(d.value);
  if (d.symbol.empty()) return "?";
  return textir::isIdentifier(d.symbol) ? d.symbol : quoteString(d.symbol);
}
}  // namespace

std::string typeToText(const TensorType& t) {
  std::string s = t.dtype == DType::Undefined ? "?" : std::string(dtypeName(t.dtype));
  if (!t.dims) return t.dtype == DType::Undefined ? s : s + "[*]";
  s += '[';
  for (size_t i = 0; i < t.dims->size(); ++i) {
    if (i) s += ',';
    s += dimText((*t.dims)[i]);
  }
  return s + ']';
}

}  // namespace tessel::textir
