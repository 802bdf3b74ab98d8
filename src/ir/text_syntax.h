// Lexical conventions of the textual IR shared by its printer and parser (names, quoting, number spelling).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tessel {
struct Model;
struct TensorType;
}

namespace tessel::textir {

/// Characters of an unquoted value / graph / device name: letters, digits, '_' and '.'.
bool isNameChar(char c);
/// True when `s` can be printed after '%' or '@' without quotes.
bool isPlainName(std::string_view s);
/// True for a C-like identifier ([A-Za-z_][A-Za-z0-9_]*), the unquoted form of attribute keys and symbols.
bool isIdentifier(std::string_view s);
/// Words that the parser treats specially where an identifier could appear (quoted when used as symbols).
bool isReservedWord(std::string_view s);

/// A double-quoted string literal with escapes (\" \\ \n \t \r and \xHH for other control bytes).
std::string quoteString(std::string_view s);
/// `s` unquoted when it is a plain name, else quoted.
std::string nameOrQuoted(std::string_view s);

/// Spelling of a float that parses back to the same bits: "%.9g", "inf", "-inf", "nan", or
/// "nan(0x7fc00001)" for a NaN with another bit pattern. With `markAsFloat`, integral values get ".0" so
/// that attribute literals keep their kind ("1.0" is a float, "1" an int).
std::string formatFloat(float v, bool markAsFloat);
/// Same for doubles ("%.17g", NaN bits as 16 hex digits).
std::string formatDouble(double v, bool markAsFloat);

/// "f32[N,3,?,\"w h\"]", "f32[*]", "f32[]", "?" (unknown type), "?[2]" (rank only).
std::string typeToText(const TensorType& type);

/// The canonical quiet NaN bit patterns printed as plain "nan".
constexpr uint32_t kCanonicalNanF32 = 0x7fc00000u;
constexpr uint64_t kCanonicalNanF64 = 0x7ff8000000000000ull;

/// Supplies the side file's bytes the first time a constant refers to it. Gets the name from the model
/// header's `side_file` clause ("" when absent); nullopt means the file is missing.
using SideFileLoader = std::function<std::optional<std::string_view>(const std::string& sideFileName)>;
/// parseModelText with the side file loaded lazily (readModelTextFile needs the header's file name).
std::unique_ptr<Model> parseModelTextWithLoader(std::string_view text, const std::string& fileName,
                                                const SideFileLoader& loader);

}  // namespace tessel::textir
