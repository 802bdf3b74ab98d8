// Tests of the hardware configuration file: shipped configs, validation messages, hash, supports().
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"
#include "tessel/support/error.h"

namespace {

using tessel::UserError;
using tessel::hw::HardwareConfig;
using tessel::hw::OpQuery;
using json = nlohmann::json;

std::string configPath(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/configs/" + name; }

json readJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

/// The message of the UserError fromJson throws for `doc`, or "" when it does not throw.
std::string errorOf(const json& doc) {
  try {
    HardwareConfig::fromJson(doc, "test.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(HwConfig, ShippedConfigsLoadWithExpectedParameters) {
  HardwareConfig def = HardwareConfig::load(configPath("default.json"));
  const auto* npu = def.firstNpu();
  ASSERT_NE(npu, nullptr);
  EXPECT_EQ(npu->npu.dim, 16u);
  EXPECT_EQ(npu->npu.bufferBytes[0], 32u * 1024);
  EXPECT_EQ(npu->npu.bufferBytes[1], 256u * 1024);
  EXPECT_EQ(npu->npu.bufferBytes[2], 128u * 1024);
  EXPECT_TRUE(def.device("cpu").supportsAllOps);

  HardwareConfig tiny = HardwareConfig::load(configPath("tiny.json"));
  for (uint64_t bytes : tiny.firstNpu()->npu.bufferBytes) EXPECT_LE(bytes, 8u * 1024);
  HardwareConfig nogroup = HardwareConfig::load(configPath("no-grouped-conv.json"));
  EXPECT_NE(def.hash(), nogroup.hash());
  EXPECT_NE(def.hash(), tiny.hash());
}

struct BadCase {
  const char* what;
  std::function<void(json&)> mutate;
  std::vector<std::string> expectedInMessage;
};

TEST(HwConfig, EveryBadCaseNamesFileKeyAndExpectation) {
  const json good = readJson(configPath("default.json"));
  const std::vector<BadCase> cases = {
      {"dim zero", [](json& d) { d["devices"][0]["array_dim"] = 0; }, {"test.json", "devices[0].array_dim", "[1, 256]"}},
      {"buffer below one tile",
       [](json& d) { d["devices"][0]["buffers"]["input_bytes"] = 512; },
       {"devices[0].buffers.input_bytes", "16x16", "1024 bytes"}},
      {"missing field", [](json& d) { d["devices"][0]["dma"].erase("row_cycles"); },
       {"devices[0].dma.row_cycles", "missing required field"}},
      {"wrong type", [](json& d) { d["devices"][0]["units"]["load"]["setup_cycles"] = "forty"; },
       {"devices[0].units.load.setup_cycles", "expected an integer", "string"}},
      {"unknown op", [](json& d) { d["devices"][0]["ops"]["Frobnicate"] = json::object(); },
       {"devices[0].ops.Frobnicate", "unknown operator 'Frobnicate'"}},
      {"unknown key", [](json& d) { d["devices"][0]["buffers"]["inptu_bytes"] = 4096; },
       {"devices[0].buffers.inptu_bytes", "unknown key"}},
      {"unknown constraint", [](json& d) { d["devices"][0]["ops"]["Conv"]["pads"] = json::array({1}); },
       {"devices[0].ops.Conv.pads", "unknown key"}},
      {"bad group", [](json& d) { d["devices"][0]["ops"]["Conv"]["group"] = "some"; },
       {"devices[0].ops.Conv.group", "depthwise"}},
      {"bad element type", [](json& d) { d["devices"][0]["ops"]["Relu"]["element_types"] = json::array({"f33"}); },
       {"devices[0].ops.Relu.element_types", "unknown element type 'f33'"}},
      {"override to unknown device", [](json& d) { d["overrides"]["conv1"] = "gpu"; },
       {"overrides.conv1", "'gpu'"}},
      {"no cpu", [](json& d) { d["devices"].erase(1); }, {"key 'devices'", "cpu"}},
      {"duplicate name", [](json& d) { d["devices"][1]["name"] = "npu0"; }, {"devices[1].name", "duplicate"}},
      {"bad kind", [](json& d) { d["devices"][0]["kind"] = "gpu"; }, {"devices[0].kind", "\"cpu\", \"npu\""}},
      {"negative clock", [](json& d) { d["devices"][0]["clock_mhz"] = -5; }, {"devices[0].clock_mhz", "positive"}},
      {"buffer not multiple of 4", [](json& d) { d["devices"][0]["buffers"]["output_bytes"] = 4098; },
       {"devices[0].buffers.output_bytes", "multiple of 4"}},
      {"buffer beyond address space", [](json& d) { d["devices"][0]["buffers"]["weight_bytes"] = 1ull << 30; },
       {"devices[0].buffers.weight_bytes"}},
      {"zero queue depth", [](json& d) { d["devices"][0]["units"]["vector"]["queue_depth"] = 0; },
       {"devices[0].units.vector.queue_depth"}},
  };
  ASSERT_EQ(errorOf(good), "") << "the shipped default config must be valid";
  for (const BadCase& c : cases) {
    json doc = good;
    c.mutate(doc);
    std::string msg = errorOf(doc);
    ASSERT_FALSE(msg.empty()) << c.what << ": expected a UserError";
    for (const std::string& part : c.expectedInMessage) {
      EXPECT_NE(msg.find(part), std::string::npos) << c.what << ": message '" << msg << "' lacks '" << part << "'";
    }
  }
}

TEST(HwConfig, LoadNamesTheFileForMissingAndMalformedFiles) {
  try {
    HardwareConfig::load("/nonexistent/hw.json");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/hw.json"), std::string::npos);
  }
  std::string path = testing::TempDir() + "/hw_bad.json";
  std::ofstream(path) << "{ \"name\": ";
  try {
    HardwareConfig::load(path);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
}

TEST(HwConfig, Fnv1aMatchesPublishedVectors) {
  // Reference values of the FNV-1a 64-bit test suite (Fowler/Noll/Vo).
  EXPECT_EQ(tessel::hw::fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(tessel::hw::fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(tessel::hw::fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(HwConfig, HashIgnoresFormattingAndChangesWithValues) {
  HardwareConfig a = HardwareConfig::load(configPath("default.json"));
  // Same document, different whitespace and key order: rewrite it compactly with keys reversed.
  json doc = readJson(configPath("default.json"));
  std::string path = testing::TempDir() + "/hw_reformatted.json";
  {
    std::ofstream out(path);
    out << "{\"overrides\":" << doc["overrides"].dump() << ",\n   \"devices\" : " << doc["devices"].dump(1)
        << ", \"description\": " << doc["description"].dump() << ", \"name\": " << doc["name"].dump() << "}";
  }
  HardwareConfig b = HardwareConfig::load(path);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hashHex().size(), 16u);
  EXPECT_EQ(a.hash(), tessel::hw::fnv1a64(doc.dump()));
  doc["devices"][0]["dma"]["row_cycles"] = 2;
  EXPECT_NE(HardwareConfig::fromJson(doc, "x").hash(), a.hash());
}

OpQuery conv(int64_t group, int64_t cin, int64_t cout, int64_t k = 3) {
  OpQuery q;
  q.opType = "Conv";
  q.elementType = "f32";
  q.layout = "NCHW";
  q.kernelShape = {k, k};
  q.strides = {1, 1};
  q.dilations = {1, 1};
  q.group = group;
  q.inChannels = cin;
  q.outChannels = cout;
  q.nodeName = "conv_a";
  return q;
}

TEST(HwConfig, SupportsAnswersPerDeviceWithReasons) {
  HardwareConfig def = HardwareConfig::load(configPath("default.json"));
  HardwareConfig nogroup = HardwareConfig::load(configPath("no-grouped-conv.json"));
  EXPECT_TRUE(def.supports("npu0", conv(1, 16, 32)).supported);
  EXPECT_TRUE(def.supports("npu0", conv(32, 32, 32)).supported);
  EXPECT_TRUE(nogroup.supports("npu0", conv(1, 16, 32)).supported);
  auto dw = nogroup.supports("npu0", conv(32, 32, 32));
  EXPECT_FALSE(dw.supported);
  EXPECT_NE(dw.reason.find("group 32 (depthwise) not in [1]"), std::string::npos) << dw.reason;
  EXPECT_TRUE(nogroup.supports("cpu", conv(32, 32, 32)).supported);

  auto k9 = def.supports("npu0", conv(1, 16, 16, 9));
  EXPECT_FALSE(k9.supported);
  EXPECT_NE(k9.reason.find("kernel size 9"), std::string::npos) << k9.reason;
  OpQuery i8 = conv(1, 16, 16);
  i8.elementType = "i8";
  EXPECT_NE(def.supports("npu0", i8).reason.find("element type 'i8'"), std::string::npos);
  OpQuery topk;
  topk.opType = "TopK";
  topk.elementType = "f32";
  EXPECT_NE(def.supports("npu0", topk).reason.find("does not list operator TopK"), std::string::npos);
  EXPECT_THROW(def.supports("tpu", topk), UserError);
}

TEST(HwConfig, OverridesPinNodesToADevice) {
  json doc = readJson(configPath("default.json"));
  doc["overrides"]["conv_a"] = "cpu";
  HardwareConfig cfg = HardwareConfig::fromJson(doc, "x");
  EXPECT_EQ(cfg.overrideFor("conv_a").value_or(""), "cpu");
  EXPECT_FALSE(cfg.overrideFor("conv_b").has_value());
  auto r = cfg.supports("npu0", conv(1, 16, 16));
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("pinned to device 'cpu'"), std::string::npos);
  OpQuery other = conv(1, 16, 16);
  other.nodeName = "conv_b";
  EXPECT_TRUE(cfg.supports("npu0", other).supported);
}

TEST(HwConfig, ChannelLimitsAreEnforced) {
  json doc = readJson(configPath("default.json"));
  doc["devices"][0]["ops"]["Conv"]["max_in_channels"] = 64;
  HardwareConfig cfg = HardwareConfig::fromJson(doc, "x");
  EXPECT_TRUE(cfg.supports("npu0", conv(1, 64, 16)).supported);
  auto r = cfg.supports("npu0", conv(1, 65, 16));
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("65 input channels"), std::string::npos);
}

}  // namespace
