// Names, sizes and numpy descriptors of element types.
#include "tessel/support/dtype.h"

#include <array>
#include <fmt/format.h>

namespace tessel {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  std::string_view numpy;
};
constexpr std::array<DTypeInfo, 17> kInfo = {{
    {DType::Undefined, "undef", 0, ""},
    {DType::Float32, "f32", 4, "<f4"},
    {DType::UInt8, "u8", 1, "|u1"},
    {DType::Int8, "i8", 1, "|i1"},
    {DType::UInt16, "u16", 2, "<u2"},
    {DType::Int16, "i16", 2, "<i2"},
    {DType::Int32, "i32", 4, "<i4"},
    {DType::Int64, "i64", 8, "<i8"},
    {DType::String, "str", sizeof(std::string), ""},
    {DType::Bool, "bool", 1, "|b1"},
    {DType::Float16, "f16", 2, "<f2"},
    {DType::Float64, "f64", 8, "<f8"},
    {DType::UInt32, "u32", 4, "<u4"},
    {DType::UInt64, "u64", 8, "<u8"},
    {DType::Complex64, "c64", 8, "<c8"},
    {DType::Complex128, "c128", 16, "<c16"},
    {DType::BFloat16, "bf16", 2, ""},
}};

const DTypeInfo& info(DType t) {
  auto i = static_cast<size_t>(t);
  TESSEL_ASSERT(i < kInfo.size(), fmt::format("bad dtype {}", i));
  return kInfo[i];
}
}  // namespace

size_t dtypeSize(DType t) { return info(t).size; }
std::string_view dtypeName(DType t) { return info(t).name; }
std::string_view dtypeNumpyDescr(DType t) { return info(t).numpy; }

DType parseDType(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return DType::Undefined;
}

void throwUnsupportedDType(DType t, std::string_view what) {
  throw UserError(fmt::format("{}: element type {} is not supported here", what, dtypeName(t)));
}

}  // namespace tessel
