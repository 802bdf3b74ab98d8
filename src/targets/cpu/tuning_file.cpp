// The tuning file of `tessel compile --tune --tuning-file F`: read back and validated before a compile uses it.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessel/rt/conv.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/tuner.h"
#include "tessel/tune/search.h"

namespace tessel::cpu {
namespace {

/// The kernels of one layout a tuning file may name (what --tune chooses from).
std::string knownKernelNames(rt::ConvLayout layout) {
  std::vector<std::string> names;
  for (const rt::Conv2dKernel& k : rt::conv2d_kernels())
    if (k.layout == layout) names.push_back(k.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

/// A key is the 16 non-negative integers of convGeometryKey, after "nchwc8 " for a blocked conv
/// (convTuningKey); `layout` gets the layout the key names.
bool isTuningKey(const std::string& key, rt::ConvLayout* layout) {
  std::istringstream in(key);
  int fields = 0;
  std::string part;
  *layout = rt::ConvLayout::NCHW;
  if (key.rfind(kBlockedKeyPrefix, 0) == 0) {
    *layout = rt::ConvLayout::NCHWc8;
    in >> part;
  }
  while (in >> part) {
    if (part.find_first_not_of("0123456789") != std::string::npos || part.size() > 12) return false;
    ++fields;
  }
  return fields == 16;
}

}  // namespace

TuningChoices parseTuningFile(const std::string& text, const std::string& origin, const std::string& modelKey) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(fmt::format("tuning file '{}' is not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw UserError(fmt::format("tuning file '{}': expected a JSON object", origin));
  if (j.value("format", "") == "tessel-tune-record") {
    // A record of `tessel tune --target cpu`: its result holds the same two keys.
    if (j.value("version", -1) != tune::kRecordVersion)
      throw UserError(fmt::format("tuning record '{}' has format version {}, this tessel reads version {}", origin,
                                  j.contains("version") ? j["version"].dump() : "(none)", tune::kRecordVersion));
    if (!j.contains("identity") || j["identity"].value("target", "") != "cpu")
      throw UserError(fmt::format("tuning record '{}' was made for another target ({}), not cpu", origin,
                                  j.contains("identity") ? j["identity"].value("target", "?") : "?"));
    if (!j.contains("result") || !j["result"].contains("conv_kernels"))
      throw UserError(fmt::format("tuning record '{}' has no result yet (run tessel tune again to complete it)", origin));
    nlohmann::json result = j["result"];
    j = nlohmann::json{{"model", result["model_key"]}, {"conv_kernels", result["conv_kernels"]}};
    if (result.contains("layout_regions")) j["layout_regions"] = result["layout_regions"];
  }
  const auto model = j.find("model");
  if (model == j.end() || !model->is_string())
    throw UserError(fmt::format("tuning file '{}': no \"model\" key (a string written by --tune)", origin));
  if (model->get<std::string>() != modelKey)
    throw UserError(fmt::format("tuning file '{}' was written for another model (model key {}, this model {})", origin,
                                model->get<std::string>(), modelKey));
  const auto kernels = j.find("conv_kernels");
  if (kernels == j.end() || !kernels->is_object())
    throw UserError(fmt::format("tuning file '{}': \"conv_kernels\" must be an object of conv geometry -> kernel name",
                                origin));
  TuningChoices choices;
  for (const auto& [key, value] : kernels->items()) {
    rt::ConvLayout layout;
    if (!isTuningKey(key, &layout))
      throw UserError(fmt::format("tuning file '{}': conv_kernels key '{}' is not a conv geometry (16 integers, "
                                  "after \"nchwc8 \" for a blocked conv)",
                                  origin, key));
    if (!value.is_string())
      throw UserError(fmt::format("tuning file '{}': conv_kernels['{}'] must be a kernel name, is {}", origin, key,
                                  value.dump()));
    const std::string name = value.get<std::string>();
    const rt::Conv2dKernel* k = rt::find_conv2d_kernel(name.c_str());
    if (k == nullptr || k->layout != layout)
      throw UserError(fmt::format("tuning file '{}': conv_kernels['{}'] names kernel '{}', which is not an {} "
                                  "convolution kernel of this Tessel (known: {})",
                                  origin, key, name, layout == rt::ConvLayout::NCHWc8 ? "NCHWc8" : "NCHW",
                                  knownKernelNames(layout)));
    choices.kernels[key] = name;
  }
  if (const auto layouts = j.find("layout_regions"); layouts != j.end()) {
    if (!layouts->is_object())
      throw UserError(fmt::format("tuning file '{}': \"layout_regions\" must be an object of layout region -> "
                                  "\"nchw\" or \"nchwc8\"",
                                  origin));
    for (const auto& [region, value] : layouts->items()) {
      if (!value.is_string() || (value.get<std::string>() != "nchw" && value.get<std::string>() != "nchwc8"))
        throw UserError(fmt::format("tuning file '{}': layout_regions['{}'] is {}, expected \"nchw\" or \"nchwc8\"",
                                    origin, region, value.dump()));
      choices.layouts[region] = value.get<std::string>();
    }
  }
  return choices;
}

}  // namespace tessel::cpu
