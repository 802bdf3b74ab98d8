// Tokenizer of the textual IR: a streaming lexer with line:column positions and bounded lookahead.
#pragma once

#include <deque>
#include <string>
#include <string_view>

namespace tessel::textir {

enum class Tok {
  End,        ///< end of input
  Ident,      ///< [A-Za-z_][A-Za-z0-9_.]*  (keywords, op names, dtypes, symbols)
  ValueName,  ///< %name or %"quoted name"
  GlobalName, ///< @name or @"quoted name" (graph names, devices, @side)
  String,     ///< "..." with escapes decoded
  Number,     ///< integer or float spelling, possibly signed ("-3", "1.5e-3", "-inf", "0x1p-3")
  LParen, RParen, LBrace, RBrace, LBracket, RBracket, Comma, Colon, Equals, Arrow, Question, Star, Less,
};

struct Token {
  Tok kind = Tok::End;
  std::string text;  ///< decoded text: the name without '%'/'@' and quotes, the string's contents, the number
  int line = 1;
  int col = 1;
  /// How the token is quoted in diagnostics ("end of input" for End).
  std::string display() const;
};

/// Splits text into tokens on demand (tensor data can be large, so tokens are not materialised at once).
class Lexer {
 public:
  Lexer(std::string_view text, std::string fileName) : text_(text), file_(std::move(fileName)) {}

  /// Token `ahead` positions from the current one (0 = current).
  const Token& peek(size_t ahead = 0);
  Token next();
  const std::string& fileName() const { return file_; }
  size_t textSize() const { return text_.size(); }

  /// Throws UserError "FILE:LINE:COL: message".
  [[noreturn]] void fail(int line, int col, const std::string& message) const;

 private:
  Token lexOne();
  void skipSpaceAndComments();
  std::string lexQuoted(int line, int col);
  std::string lexNumber();
  char cur() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  char at(size_t k) const { return pos_ + k < text_.size() ? text_[pos_ + k] : '\0'; }
  void advance();

  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
  std::deque<Token> lookahead_;
};

}  // namespace tessel::textir
