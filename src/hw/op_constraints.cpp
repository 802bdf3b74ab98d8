// Operator constraints of a device (element types, layouts, kernel sizes, strides, dilations, groups,
// channel limits): parsing from the configuration file and checking an OpQuery against them.
#include <algorithm>

#include <fmt/format.h>

#include "hw/config_reader.h"
#include "tessel/ops/registry.h"
#include "tessel/support/dtype.h"

namespace tessel::hw {

bool isDataMovementOp(const std::string& opType) {
  // Resize: its nearest mode with integer factors is data movement; the npu lowering refuses the other modes.
  // Transpose: strided loads (rows, or one word per element when the contiguous axis moves).
  static const std::vector<std::string> ops = {"Concat", "Flatten", "Gather",  "Identity",  "Reshape",  "Resize",
                                               "Slice",  "Split",   "Squeeze", "Transpose", "Unsqueeze"};
  return std::find(ops.begin(), ops.end(), opType) != ops.end();
}

const std::vector<std::string>& knownOperatorNames() {
  // The standard operators of the registry (sorted by name).
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const OpDef* def : OpRegistry::instance().all())
      if (def->domain.empty()) out.push_back(def->name);
    return out;
  }();
  return names;
}

bool AllowedValues::allows(int64_t v) const {
  return any || std::find(values.begin(), values.end(), v) != values.end();
}

std::string AllowedValues::describe() const { return any ? "any" : fmt::format("[{}]", fmt::join(values, ", ")); }

std::string AllowedGroups::describe() const {
  if (any) return "any";
  std::vector<std::string> parts;
  for (int64_t v : values) parts.push_back(std::to_string(v));
  if (depthwise) parts.push_back("depthwise");
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

namespace {

AllowedValues readAllowedValues(const JsonReader& op, const std::string& key) {
  AllowedValues out;
  if (!op.has(key)) return out;
  const nlohmann::json& v = op.raw(key);
  if (v.is_string() && v.get<std::string>() == "any") return out;
  if (!v.is_array() || v.empty()) op.fail(key, "expected \"any\" or a non-empty array of positive integers, got " + jsonTypeName(v));
  out.any = false;
  for (const auto& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 1) op.fail(key, "expected positive integers, got " + jsonTypeName(e));
    out.values.push_back(e.get<int64_t>());
  }
  return out;
}

AllowedGroups readAllowedGroups(const JsonReader& op) {
  AllowedGroups out;
  if (!op.has("group")) return out;
  const nlohmann::json& v = op.raw("group");
  const std::string expected = "expected \"any\", \"depthwise\" or an array of positive integers and/or \"depthwise\", got ";
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "any") return out;
    if (s != "depthwise") op.fail("group", expected + jsonTypeName(v));
    out.any = false;
    out.depthwise = true;
    return out;
  }
  if (!v.is_array() || v.empty()) op.fail("group", expected + jsonTypeName(v));
  out.any = false;
  for (const auto& e : v) {
    if (e.is_string() && e.get<std::string>() == "depthwise") {
      out.depthwise = true;
    } else if (e.is_number_integer() && e.get<int64_t>() >= 1) {
      out.values.push_back(e.get<int64_t>());
    } else {
      op.fail("group", expected + "an array holding " + jsonTypeName(e));
    }
  }
  return out;
}

std::vector<std::string> readStringList(const JsonReader& op, const std::string& key, bool dtypes) {
  std::vector<std::string> out;
  if (!op.has(key)) return out;
  const nlohmann::json& v = op.raw(key);
  if (v.is_string() && v.get<std::string>() == "any") return out;
  if (!v.is_array() || v.empty()) op.fail(key, "expected \"any\" or a non-empty array of strings, got " + jsonTypeName(v));
  for (const auto& e : v) {
    if (!e.is_string()) op.fail(key, "expected strings, got " + jsonTypeName(e));
    std::string s = e.get<std::string>();
    if (dtypes && (parseDType(s) == DType::Undefined || parseDType(s) == DType::String)) {
      op.fail(key, "unknown element type '" + s + "' (expected f32, f16, bf16, f64, i8, i16, i32, i64, u8, ... )");
    }
    out.push_back(s);
  }
  return out;
}

std::optional<int64_t> readLimit(const JsonReader& op, const std::string& key) {
  if (!op.has(key)) return std::nullopt;
  return static_cast<int64_t>(op.u64(key, 1, uint64_t{1} << 40));
}

/// Empty when every element of `given` is allowed, else "<what> <value> not in <allowed>".
std::string checkEach(const AllowedValues& allowed, const std::vector<int64_t>& given, const char* what) {
  for (int64_t v : given) {
    if (!allowed.allows(v)) return fmt::format("{} {} not in {}", what, v, allowed.describe());
  }
  return "";
}

}  // namespace

OpConstraints readOpConstraints(const JsonReader& op) {
  OpConstraints c;
  c.elementTypes = readStringList(op, "element_types", true);
  c.layouts = readStringList(op, "layouts", false);
  c.kernelSizes = readAllowedValues(op, "kernel_sizes");
  c.strides = readAllowedValues(op, "strides");
  c.dilations = readAllowedValues(op, "dilations");
  c.groups = readAllowedGroups(op);
  c.maxInChannels = readLimit(op, "max_in_channels");
  c.maxOutChannels = readLimit(op, "max_out_channels");
  op.rejectUnknownKeys();
  return c;
}

std::string checkOpConstraints(const OpConstraints& c, const OpQuery& q) {
  auto listed = [](const std::vector<std::string>& list, const std::string& v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  if (!listed(c.elementTypes, q.elementType)) {
    return fmt::format("element type '{}' not in [{}]", q.elementType, fmt::join(c.elementTypes, ", "));
  }
  if (!q.layout.empty() && !listed(c.layouts, q.layout)) {
    return fmt::format("layout '{}' not in [{}]", q.layout, fmt::join(c.layouts, ", "));
  }
  if (auto why = checkEach(c.kernelSizes, q.kernelShape, "kernel size"); !why.empty()) return why;
  if (auto why = checkEach(c.strides, q.strides, "stride"); !why.empty()) return why;
  if (auto why = checkEach(c.dilations, q.dilations, "dilation"); !why.empty()) return why;
  if (!c.groups.any) {
    bool isDepthwise = q.group > 1 && q.inChannels == q.group;
    bool ok = std::find(c.groups.values.begin(), c.groups.values.end(), q.group) != c.groups.values.end() ||
              (c.groups.depthwise && isDepthwise);
    if (!ok) return fmt::format("group {}{} not in {}", q.group, isDepthwise ? " (depthwise)" : "", c.groups.describe());
  }
  if (c.maxInChannels && q.inChannels > *c.maxInChannels) {
    return fmt::format("{} input channels exceed the limit {}", q.inChannels, *c.maxInChannels);
  }
  if (c.maxOutChannels && q.outChannels > *c.maxOutChannels) {
    return fmt::format("{} output channels exceed the limit {}", q.outChannels, *c.maxOutChannels);
  }
  return "";
}

}  // namespace tessel::hw
