// A JSON reader for configuration files whose every error names the origin, the key path and what was expected.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"

namespace tessel::hw {

/// A view of one JSON object or array at a key path; remembers which keys were read so that
/// rejectUnknownKeys() can refuse typos.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& node, std::string origin, std::string path)
      : node_(node), origin_(std::move(origin)), path_(std::move(path)) {}

  bool has(const std::string& key) const { return node_.is_object() && node_.contains(key); }
  /// The raw value of a present key (marks it read).
  const nlohmann::json& raw(const std::string& key) const;
  /// All keys of this object (marks them read).
  std::vector<std::string> keys() const;

  JsonReader object(const std::string& key) const;
  JsonReader array(const std::string& key) const;
  size_t size() const { return node_.size(); }
  JsonReader element(size_t index) const;

  uint32_t u32(const std::string& key, uint32_t min, uint32_t max) const;
  uint64_t u64(const std::string& key, uint64_t min, uint64_t max) const;
  double positiveNumber(const std::string& key) const;
  std::string nonEmptyString(const std::string& key) const;
  void optionalString(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string oneOf(const std::string& key, std::initializer_list<const char*> choices) const;

  /// Throws UserError "<origin>: key '<path.key>': <message>".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  /// Throws UserError about this node itself.
  [[noreturn]] void failSelf(const std::string& message) const;
  /// Fails on the first key of this object that no accessor read.
  void rejectUnknownKeys() const;

  std::string childPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  const nlohmann::json& required(const std::string& key) const;

  const nlohmann::json& node_;
  std::string origin_;
  std::string path_;
  mutable std::set<std::string> read_;
};

/// Describes a JSON value's type for "expected X, got Y" messages.
std::string jsonTypeName(const nlohmann::json& value);

/// Parses one operator's constraints object (keys: docs/hardware-config.md, "Operator constraints").
OpConstraints readOpConstraints(const JsonReader& op);
/// Empty when `query` satisfies `c`, else the first violated constraint in words.
std::string checkOpConstraints(const OpConstraints& c, const OpQuery& query);

}  // namespace tessel::hw
