// Tokenizer of the textual IR (see docs/ir.md, "Lexical structure").
#include "text_lexer.h"

#include <fmt/format.h>

#include "tessel/support/error.h"
#include "text_syntax.h"

namespace tessel::textir {

std::string Token::display() const {
  constexpr size_t kMaxShown = 32;
  std::string s;
  switch (kind) {
    case Tok::End: return "end of input";
    case Tok::ValueName: s = std::string(1, '%').append(nameOrQuoted(text)); break;
    case Tok::GlobalName: s = std::string(1, '@').append(nameOrQuoted(text)); break;
    case Tok::String: s = quoteString(text); break;
    default: s = text;
  }
  if (s.size() > kMaxShown) s = s.substr(0, kMaxShown) + "...";
  return "'" + s + "'";
}

void Lexer::fail(int line, int col, const std::string& message) const {
  throw UserError(fmt::format("{}:{}:{}: {}", file_, line, col, message));
}

const Token& Lexer::peek(size_t ahead) {
  while (lookahead_.size() <= ahead) lookahead_.push_back(lexOne());
  return lookahead_[ahead];
}

Token Lexer::next() {
  peek(0);
  Token t = std::move(lookahead_.front());
  lookahead_.pop_front();
  return t;
}

void Lexer::advance() {
  if (pos_ >= text_.size()) return;
  if (text_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++pos_;
}

void Lexer::skipSpaceAndComments() {
  while (pos_ < text_.size()) {
    char c = cur();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance();
    } else if (c == '#') {
      while (pos_ < text_.size() && cur() != '\n') advance();
    } else {
      break;
    }
  }
}

namespace {
int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
}  // namespace

std::string Lexer::lexQuoted(int line, int col) {
  advance();  // opening quote
  std::string out;
  while (true) {
    if (pos_ >= text_.size() || cur() == '\n') fail(line, col, "expected a closing '\"' for this string, found end of line");
    char c = cur();
    if (c == '"') {
      advance();
      return out;
    }
    if (c != '\\') {
      out += c;
      advance();
      continue;
    }
    int escLine = line_, escCol = col_;
    advance();
    char e = cur();
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'x': {
        int hi = hexDigit(at(1)), lo = hexDigit(at(2));
        if (hi < 0 || lo < 0) fail(escLine, escCol, "expected two hex digits after '\\x' in a string");
        out += static_cast<char>(hi * 16 + lo);
        advance();
        advance();
        break;
      }
      default:
        fail(escLine, escCol,
             fmt::format("expected an escape (\\\" \\\\ \\n \\t \\r \\xHH), found '\\{}'", e ? std::string(1, e) : ""));
    }
    advance();
  }
}

std::string Lexer::lexNumber() {
  size_t start = pos_;
  if (cur() == '+' || cur() == '-') advance();
  bool hex = cur() == '0' && (at(1) == 'x' || at(1) == 'X');
  while (pos_ < text_.size()) {
    char c = cur();
    char prev = pos_ > start ? text_[pos_ - 1] : '\0';
    bool exponentSign = (c == '+' || c == '-') && (prev == 'p' || prev == 'P' || (!hex && (prev == 'e' || prev == 'E')));
    if (!isNameChar(c) && !exponentSign) break;
    advance();
  }
  return std::string(text_.substr(start, pos_ - start));
}

Token Lexer::lexOne() {
  skipSpaceAndComments();
  Token t;
  t.line = line_;
  t.col = col_;
  if (pos_ >= text_.size()) return t;
  char c = cur();
  auto single = [&](Tok k) {
    t.kind = k;
    t.text = std::string(1, c);
    advance();
    return t;
  };
  switch (c) {
    case '(': return single(Tok::LParen);
    case ')': return single(Tok::RParen);
    case '{': return single(Tok::LBrace);
    case '}': return single(Tok::RBrace);
    case '[': return single(Tok::LBracket);
    case ']': return single(Tok::RBracket);
    case ',': return single(Tok::Comma);
    case ':': return single(Tok::Colon);
    case '=': return single(Tok::Equals);
    case '?': return single(Tok::Question);
    case '*': return single(Tok::Star);
    case '<': return single(Tok::Less);
    default: break;
  }
  if (c == '-' && at(1) == '>') {
    advance();
    advance();
    t.kind = Tok::Arrow;
    t.text = "->";
    return t;
  }
  if (c == '"') {
    t.kind = Tok::String;
    t.text = lexQuoted(t.line, t.col);
    return t;
  }
  if (c == '%' || c == '@') {
    t.kind = c == '%' ? Tok::ValueName : Tok::GlobalName;
    advance();
    if (cur() == '"') {
      t.text = lexQuoted(line_, col_);
      return t;
    }
    size_t start = pos_;
    while (pos_ < text_.size() && isNameChar(cur())) advance();
    if (pos_ == start)
      fail(t.line, t.col, fmt::format("expected a name or a quoted string after '{}'", c));
    t.text = std::string(text_.substr(start, pos_ - start));
    return t;
  }
  if (isDigit(c) || ((c == '-' || c == '+') && (isDigit(at(1)) || at(1) == '.' || isAlpha(at(1)))) ||
      (c == '.' && isDigit(at(1)))) {
    t.kind = Tok::Number;
    t.text = lexNumber();
    return t;
  }
  if (isAlpha(c)) {
    size_t start = pos_;
    while (pos_ < text_.size() && isNameChar(cur())) advance();
    t.kind = Tok::Ident;
    t.text = std::string(text_.substr(start, pos_ - start));
    return t;
  }
  std::string shown = static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f
                          ? fmt::format("\\x{:02x}", static_cast<unsigned char>(c))
                          : std::string(1, c);
  fail(t.line, t.col, fmt::format("expected a token, found '{}'", shown));
}

}  // namespace tessel::textir
