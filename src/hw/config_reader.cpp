// JsonReader: typed, range-checked access to configuration JSON with key-path error messages.
#include "hw/config_reader.h"

#include <fmt/format.h>

#include "tessel/support/error.h"

namespace tessel::hw {

std::string jsonTypeName(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "the integer " + v.dump();
  if (v.is_number()) return "the number " + v.dump();
  if (v.is_string()) return "the string " + v.dump();
  if (v.is_array()) return "an array";
  return "an object";
}

void JsonReader::fail(const std::string& key, const std::string& message) const {
  throw UserError(fmt::format("{}: key '{}': {}", origin_, childPath(key), message));
}

void JsonReader::failSelf(const std::string& message) const {
  throw UserError(fmt::format("{}: key '{}': {}", origin_, path_.empty() ? "<root>" : path_, message));
}

const nlohmann::json& JsonReader::required(const std::string& key) const {
  if (!node_.is_object()) failSelf("expected an object, got " + jsonTypeName(node_));
  auto it = node_.find(key);
  if (it == node_.end()) fail(key, "missing required field");
  read_.insert(key);
  return *it;
}

const nlohmann::json& JsonReader::raw(const std::string& key) const { return required(key); }

std::vector<std::string> JsonReader::keys() const {
  if (!node_.is_object()) failSelf("expected an object, got " + jsonTypeName(node_));
  std::vector<std::string> out;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    out.push_back(it.key());
    read_.insert(it.key());
  }
  return out;
}

JsonReader JsonReader::object(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_object()) fail(key, "expected an object, got " + jsonTypeName(v));
  return JsonReader(v, origin_, childPath(key));
}

JsonReader JsonReader::array(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_array()) fail(key, "expected an array, got " + jsonTypeName(v));
  return JsonReader(v, origin_, childPath(key));
}

JsonReader JsonReader::element(size_t index) const {
  return JsonReader(node_.at(index), origin_, fmt::format("{}[{}]", path_, index));
}

uint64_t JsonReader::u64(const std::string& key, uint64_t min, uint64_t max) const {
  const nlohmann::json& v = required(key);
  bool isInt = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  if (!isInt || v.get<uint64_t>() < min || v.get<uint64_t>() > max) {
    fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, jsonTypeName(v)));
  }
  return v.get<uint64_t>();
}

uint32_t JsonReader::u32(const std::string& key, uint32_t min, uint32_t max) const {
  return static_cast<uint32_t>(u64(key, min, max));
}

double JsonReader::positiveNumber(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_number() || !(v.get<double>() > 0)) fail(key, "expected a positive number, got " + jsonTypeName(v));
  return v.get<double>();
}

std::string JsonReader::nonEmptyString(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_string() || v.get<std::string>().empty()) fail(key, "expected a non-empty string, got " + jsonTypeName(v));
  return v.get<std::string>();
}

bool JsonReader::boolean(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + jsonTypeName(v));
  return v.get<bool>();
}

void JsonReader::optionalString(const std::string& key) const {
  if (has(key) && !required(key).is_string()) fail(key, "expected a string, got " + jsonTypeName(node_.at(key)));
}

std::string JsonReader::oneOf(const std::string& key, std::initializer_list<const char*> choices) const {
  const nlohmann::json& v = required(key);
  std::string list;
  for (const char* c : choices) {
    if (v.is_string() && v.get<std::string>() == c) return c;
    list += (list.empty() ? "\"" : ", \"") + std::string(c) + "\"";
  }
  fail(key, "expected one of " + list + ", got " + jsonTypeName(v));
}

void JsonReader::rejectUnknownKeys() const {
  if (!node_.is_object()) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (!read_.count(it.key())) fail(it.key(), "unknown key (see docs/hardware-config.md for the keys of this object)");
  }
}

}  // namespace tessel::hw
