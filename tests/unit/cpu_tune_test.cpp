// cpu target, `compile --tune`: the tuning file's choices are applicable kernels that the generated code
// calls, each the fastest of the times the tuner recorded; the tuned library matches the interpreter; and
// the tuner is the build for the model's --march (its vector width follows --march, not the tessel binary).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>

#include "targets/cpu/kernel_rules.h"
#include "tessel/interp/interpreter.h"
#include "tessel/passes/pass.h"
#include "tessel/rt/conv.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/cpu/tuner.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

Tensor randomTensor(const Shape& shape, uint32_t seed) {
  Tensor t(DType::Float32, shape);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

fs::path tempDir() {
  fs::path d = fs::temp_directory_path() / ("tessel-tune-test-" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

/// A model with one convolution of each kind the NCHW kernels distinguish: a 3-channel stem
/// (direct_small_cin or im2col), 3x3 stride 1 on a 16x16 map (Winograd or im2col, used twice: one
/// geometry), 1x1 (GEMM or im2col), depthwise 3x3 (depthwise or im2col), unpadded 3x3 to 8 channels.
struct TuneModel {
  std::unique_ptr<Model> model = std::make_unique<Model>();
  Graph& g;
  uint32_t seed = 1;
  static constexpr int kDistinctGeometries = 5;

  TuneModel() : g(*(model->graph = std::make_unique<Graph>("tune"))) {
    model->opsetImports[""] = 13;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 3, 33, 33}));
    Value* stem = relu(conv(x, 3, 16, 3, 2, 1, 1));            // 16x17x17
    Value* a = relu(conv(stem, 16, 16, 3, 1, 1, 1));           // Winograd-sized
    Value* b = conv(a, 16, 16, 3, 1, 1, 1);                    // same geometry as a
    Value* sum = relu(add(b, stem));
    Value* pw = relu(conv(sum, 16, 24, 1, 1, 0, 1));           // 1x1
    Value* dw = relu(conv(pw, 24, 24, 3, 1, 1, 24));           // depthwise
    g.addOutput(conv(dw, 24, 8, 3, 1, 0, 1));                  // unpadded, narrower
  }
  Value* node(const std::string& op, const std::vector<Value*>& ins, std::map<std::string, AttrValue> attrs = {}) {
    Node* n = g.addNode(op, ins, {g.uniqueName(op + "_out")}, g.uniqueName(op));
    for (auto& [k, v] : attrs) n->setAttr(k, v);
    return n->output(0);
  }
  Value* relu(Value* v) { return node("Relu", {v}); }
  Value* add(Value* a, Value* b) { return node("Add", {a, b}); }
  Value* conv(Value* x, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad, int64_t group) {
    Value* w = g.addConstant(g.uniqueName("w"), randomTensor({cout, cin / group, k, k}, seed++));
    Value* bias = g.addConstant(g.uniqueName("b"), randomTensor({cout}, seed++));
    return node("Conv", {x, w, bias},
                {{"kernel_shape", std::vector<int64_t>{k, k}}, {"strides", std::vector<int64_t>{stride, stride}},
                 {"pads", std::vector<int64_t>{pad, pad, pad, pad}}, {"group", group}});
  }
};

nlohmann::json readJson(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

/// The 16 fields of a tuning file's geometry key.
rt::Conv2dShape shapeOfKey(const std::string& key) {
  rt::Conv2dShape s;
  std::istringstream ss(key);
  ss >> s.batch >> s.in_channels >> s.in_h >> s.in_w >> s.out_channels >> s.kernel_h >> s.kernel_w >> s.stride_h >>
      s.stride_w >> s.pad_top >> s.pad_left >> s.pad_bottom >> s.pad_right >> s.dilation_h >> s.dilation_w >> s.groups;
  EXPECT_TRUE(ss && (ss >> std::ws).eof()) << "malformed geometry key '" << key << "'";
  return s;
}

/// `actual` (a compiled library's output, named by `what`) matches the interpreter's `expected`: the largest
/// difference within 1e-4 of the largest magnitude, which is not zero.
void expectMatches(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  double maxMag = 0, worst = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    maxMag = std::max(maxMag, std::fabs(double(expected.data<float>()[i])));
    worst = std::max(worst, std::fabs(double(actual.data<float>()[i]) - expected.data<float>()[i]));
  }
  EXPECT_GT(maxMag, 0.0) << what;
  EXPECT_LE(worst, 1e-4 * maxMag) << what << ": max |diff| " << worst << " of max " << maxMag;
}

TEST(CpuTune, ChoicesAreTheFastestApplicableKernelsAndTheTunedModelMatchesTheInterpreter) {
  TuneModel m;
  cpu::CompileOptions o;
  // NCHW everywhere: with `auto`, an AVX2-only host blocks some regions in NCHWc8, whose convs are tuned among
  // the NCHWc8 kernels (the next test), and the checks below would depend on the machine.
  o.layout = "nchw";
  cpu::prepareModel(*m.model, o);
  fs::path file = tempDir() / "tuning.json";
  o.tune = true;
  o.tuningFile = file.string();
  std::vector<std::string> progress;
  o.progress = [&](const std::string& line) { progress.push_back(line); };
  fs::path so = tempDir() / "tuned.so";
  cpu::CompileReport report = cpu::compileSharedLibrary(*m.model, so.string(), o);
  EXPECT_EQ(report.tunedConvs, TuneModel::kDistinctGeometries);
  bool tuningLine = false;
  for (const std::string& l : progress) tuningLine = tuningLine || l.rfind("tuning", 0) == 0;
  EXPECT_TRUE(tuningLine) << "no progress line for the tuning stage";

  nlohmann::json j = readJson(file);
  const auto& choices = j.at("conv_kernels");
  EXPECT_EQ(choices.size(), static_cast<size_t>(TuneModel::kDistinctGeometries));
  cpu::GeneratedModel source = cpu::generateModel(*m.model, [&] {
    cpu::CompileOptions replay;
    replay.layout = "nchw";
    replay.tuningFile = file.string();
    return replay;
  }());
  for (const auto& [key, value] : choices.items()) {
    rt::Conv2dShape s = shapeOfKey(key);
    std::string name = value.get<std::string>();
    const rt::Conv2dKernel* k = rt::find_conv2d_kernel(name.c_str());
    ASSERT_NE(k, nullptr) << key << ": unknown kernel " << name;
    EXPECT_EQ(k->layout, rt::ConvLayout::NCHW) << key;
    EXPECT_TRUE(k->applicable(s)) << key << ": " << name << " does not apply";
    // Every applicable NCHW kernel was timed, and the choice is the fastest of them, or the untuned
    // choice when that is within the switch margin (5 %) of the fastest.
    const auto& times = j.at("conv_times_ms").at(key);
    size_t applicable = 0;
    double fastest = 1e30;
    for (const rt::Conv2dKernel& c : rt::conv2d_kernels()) {
      if (c.layout != rt::ConvLayout::NCHW || !c.applicable(s)) continue;
      if (c.avx512_only && report.isa != "avx512") continue;  // not a candidate for AVX2 code
      ++applicable;
      ASSERT_TRUE(times.contains(c.name)) << key << ": " << c.name << " was not timed";
      ASSERT_TRUE(times.at(c.name).is_number()) << key << ": " << c.name;
      EXPECT_GT(times.at(c.name).get<double>(), 0.0) << key << ": " << c.name;
      fastest = std::min(fastest, times.at(c.name).get<double>());
    }
    EXPECT_EQ(times.size(), applicable) << key;
    double chosen = times.at(name).get<double>();
    if (chosen > fastest) {
      EXPECT_EQ(name, rt::select_conv2d_kernel(s, rt::ConvLayout::NCHW)->name) << key << ": not the fastest";
      EXPECT_GE(fastest, 0.95 * chosen) << key << ": " << name << " kept although much slower";
    }
    EXPECT_EQ(j.at("tuner").at("switch_margin").get<double>(), 0.05);
    EXPECT_GE(applicable, 2u) << key << ": the model should give every conv a choice";
    // The generated code calls the chosen kernel.
    EXPECT_NE(source.source.find("rt::" + name + "("), std::string::npos) << name;
  }
  EXPECT_EQ(source.report.hash, report.hash) << "replaying the tuning file gives another program";

  std::map<std::string, Tensor> inputs = {{"x", randomTensor({1, 3, 33, 33}, 99)}};
  Tensor expected = Interpreter(m.g).run(inputs).at(0);
  Tensor actual = cpu::CompiledModel(so.string(), 1).run(inputs).at(0);
  expectMatches(actual, expected, so.string());
}

/// The generated code's calls of kernel `name`.
size_t calls(const std::string& source, const std::string& name) {
  size_t n = 0;
  for (size_t at = source.find("rt::" + name + "("); at != std::string::npos; at = source.find("rt::" + name + "(", at + 1))
    ++n;
  return n;
}

TEST(CpuTune, BlockedConvsAreTunedAmongTheKernelsOfTheirLayout) {
  // Every region in NCHWc8, AVX2 code (the layout mode auto gives an AVX2 target): the tuner's jobs are the
  // blocked convs, keyed "nchwc8 <geometry>", each timed over the NCHWc8 kernels that read its input layout.
  TuneModel m;
  cpu::CompileOptions o;
  o.layout = "nchwc8";
  o.march = "haswell";
  cpu::prepareModel(*m.model, o);
  const fs::path file = tempDir() / "tuning-c8.json";
  o.tune = true;
  o.tuningFile = file.string();
  const fs::path so = tempDir() / "tuned-c8.so";
  cpu::CompileReport report = cpu::compileSharedLibrary(*m.model, so.string(), o);
  const nlohmann::json j = readJson(file);
  const auto& choices = j.at("conv_kernels");
  EXPECT_EQ(report.tunedConvs, static_cast<int>(choices.size()));
  size_t blocked = 0, withChoice = 0;
  for (const auto& [key, value] : choices.items()) {
    if (key.rfind("nchwc8 ", 0) != 0) continue;
    ++blocked;
    const rt::Conv2dShape s = shapeOfKey(key.substr(7));
    const rt::Conv2dKernel* chosen = rt::find_conv2d_kernel(value.get<std::string>().c_str());
    ASSERT_NE(chosen, nullptr) << key;
    EXPECT_EQ(chosen->layout, rt::ConvLayout::NCHWc8) << key;
    EXPECT_TRUE(chosen->applicable(s)) << key;
    const auto& times = j.at("conv_times_ms").at(key);
    for (const auto& [name, ms] : times.items()) {
      const rt::Conv2dKernel* k = rt::find_conv2d_kernel(name.c_str());
      ASSERT_NE(k, nullptr) << key << ": " << name;
      EXPECT_EQ(k->layout, rt::ConvLayout::NCHWc8) << key << ": " << name;
      EXPECT_EQ(k->nchw_input, chosen->nchw_input) << key << ": " << name << " reads another input layout";
      EXPECT_TRUE(ms.is_number() && ms.get<double>() > 0) << key << ": " << name;
    }
    withChoice += times.size() >= 2;
  }
  // All five geometries run blocked (the 3-channel stem with the NCHWc8 stem kernel); the two 3x3 stride-1
  // ones choose between the direct kernel and Winograd.
  EXPECT_EQ(blocked, static_cast<size_t>(TuneModel::kDistinctGeometries));
  EXPECT_EQ(withChoice, 2u);

  // A tuning file that moves the Winograd-sized 3x3 (16 -> 16 on 17x17) to the direct kernel is obeyed, and
  // the program still matches the interpreter.
  const std::string winogradKey = "nchwc8 1 16 17 17 16 3 3 1 1 1 1 1 1 1 1 1";
  ASSERT_TRUE(choices.contains(winogradKey)) << j.dump(1);
  nlohmann::json forced = {{"model", j.at("model")}, {"conv_kernels", choices}};
  forced["conv_kernels"][winogradKey] = "conv2d_nchwc8_direct_avx2";
  const fs::path forcedFile = tempDir() / "forced-c8.json";
  std::ofstream(forcedFile) << forced.dump();
  cpu::CompileOptions replay;
  replay.layout = "nchwc8";
  replay.march = "haswell";
  replay.tuningFile = forcedFile.string();
  const cpu::GeneratedModel untuned = cpu::generateModel(*m.model, [&] {
    cpu::CompileOptions u = replay;
    u.tuningFile.clear();
    return u;
  }());
  const cpu::GeneratedModel direct = cpu::generateModel(*m.model, replay);
  // The geometry is two convs (a and b): both move from Winograd to the direct kernel.
  const size_t winograd = calls(untuned.source, "conv2d_winograd_f43_nchwc8_avx2");
  EXPECT_GE(winograd, 2u);
  EXPECT_EQ(calls(direct.source, "conv2d_winograd_f43_nchwc8_avx2"), winograd - 2);
  EXPECT_EQ(calls(direct.source, "conv2d_nchwc8_direct_avx2"), calls(untuned.source, "conv2d_nchwc8_direct_avx2") + 2);

  // The layout is part of the key: an NCHW kernel under an "nchwc8" key, or an NCHWc8 kernel under a plain
  // geometry key, is refused with the layout named.
  const std::string model = j.at("model").get<std::string>();
  auto parse = [&](const std::string& key, const std::string& kernel) {
    return cpu::parseTuningFile(nlohmann::json{{"model", model}, {"conv_kernels", {{key, kernel}}}}.dump(), "t.json", model);
  };
  EXPECT_EQ(parse(winogradKey, "conv2d_nchwc8_direct_avx2").kernels.at(winogradKey), "conv2d_nchwc8_direct_avx2");
  try {
    parse(winogradKey, "conv2d_nchw_im2col_gemm_avx2");
    ADD_FAILURE() << "an NCHW kernel under an nchwc8 key was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not an NCHWc8 convolution kernel"), std::string::npos) << e.what();
  }
  try {
    parse(winogradKey.substr(7), "conv2d_nchwc8_direct_avx2");
    ADD_FAILURE() << "an NCHWc8 kernel under an NCHW key was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not an NCHW convolution kernel"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse("nchwc8 1 16 17 17", "conv2d_nchwc8_direct_avx2"), UserError);

  std::map<std::string, Tensor> inputs = {{"x", randomTensor({1, 3, 33, 33}, 7)}};
  const Tensor expected = Interpreter(m.g).run(inputs).at(0);
  const fs::path directSo = tempDir() / "direct-c8.so";
  cpu::compileSharedLibrary(*m.model, directSo.string(), replay);
  for (const fs::path& lib : {so, directSo}) {
    const Tensor actual = cpu::CompiledModel(lib.string(), 1).run(inputs).at(0);
    expectMatches(actual, expected, lib.string());
  }
}

/// Two layout regions, cut apart by an AveragePool (which never runs blocked): "c1" (3x3 8 -> 16, ReLU) and
/// "c2" (3x3 16 -> 16, ReLU, 1x1 16 -> 16).
struct TwoRegionModel {
  std::unique_ptr<Model> model = std::make_unique<Model>();
  Graph& g;
  TwoRegionModel() : g(*(model->graph = std::make_unique<Graph>("regions"))) {
    model->opsetImports[""] = 13;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 8, 16, 16}));
    Value* a = node("Relu", "r1", {conv("c1", x, 8, 16, 3)});
    Value* p = g.addNode("AveragePool", {a}, {"pooled"}, "pool")->output(0);
    p->producer()->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
    p->producer()->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    Value* b = node("Relu", "r2", {conv("c2", p, 16, 16, 3)});
    g.addOutput(conv("c3", b, 16, 16, 1));
  }
  Value* node(const std::string& op, const std::string& name, const std::vector<Value*>& ins) {
    return g.addNode(op, ins, {name + "_out"}, name)->output(0);
  }
  Value* conv(const std::string& name, Value* x, int64_t cin, int64_t cout, int64_t k) {
    Value* w = g.addConstant(name + "_w", randomTensor({cout, cin, k, k}, static_cast<uint32_t>(cin * k + cout)));
    Value* bias = g.addConstant(name + "_b", randomTensor({cout}, static_cast<uint32_t>(cout + k)));
    Node* n = g.addNode("Conv", {x, w, bias}, {name + "_out"}, name);
    n->setAttr("kernel_shape", std::vector<int64_t>{k, k});
    n->setAttr("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
    return n->output(0);
  }
};

/// The nodes of `g` select-layout marked blocked, by name.
std::set<std::string> blockedNodes(const Graph& g) {
  std::set<std::string> out;
  for (const auto& n : g.nodes())
    if (n->meta.count("layout")) out.insert(n->name());
  return out;
}

TEST(CpuTune, LayoutRegionsAreGenesATuningFileSets) {
  // An AVX2 target (mode auto blocks every region with a conv): two regions, named by their first nodes.
  TwoRegionModel m;
  cpu::CompileOptions o;
  o.march = "haswell";
  cpu::prepareModel(*m.model, o);
  const std::vector<cpu::LayoutRegion> regions = cpu::layoutRegions(*m.g.clone(), false);
  ASSERT_EQ(regions.size(), 2u);
  EXPECT_EQ(regions[0].key, "c1");
  EXPECT_EQ(regions[1].key, "c2");
  EXPECT_EQ(regions[0].convs, 1);
  EXPECT_EQ(regions[1].convs, 2);
  EXPECT_TRUE(regions[0].blocked && regions[1].blocked);
  // (The ReLUs are fused into their convolutions by now.)
  EXPECT_EQ(blockedNodes(m.g), (std::set<std::string>{"c1", "c2", "c3"}));

  // select-layout.region.<key> decides one region whatever the mode; an unknown key names the regions there are.
  auto layoutWith = [&](const std::string& mode, const std::map<std::string, std::string>& regionLayouts) {
    std::unique_ptr<Model> copy = m.model->clone();
    PassOptions po;
    po.values["select-layout.mode"] = mode;
    for (const auto& [k, v] : regionLayouts) po.values[cpu::kRegionOption + k] = v;
    PassPipeline({"select-layout"}).run(*copy, po);
    return blockedNodes(*copy->graph);
  };
  EXPECT_EQ(layoutWith("auto", {{"c1", "nchw"}}), (std::set<std::string>{"c2", "c3"}));
  EXPECT_EQ(layoutWith("nchw", {{"c2", "nchwc8"}}), (std::set<std::string>{"c2", "c3"}));
  EXPECT_EQ(layoutWith("nchwc8", {{"c1", "nchw"}, {"c2", "nchw"}}), std::set<std::string>{});
  try {
    layoutWith("auto", {{"r2", "nchw"}});
    ADD_FAILURE() << "a region key that is not a region's first node was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no layout region of that name (its regions are named by their first node: "
                                         "c1, c2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(layoutWith("auto", {{"c1", "nhwc"}}), UserError);

  // Through a tuning file: region c1 in NCHW. The code changes (c1 runs an NCHW kernel, a reorder joins the
  // regions' edge) and the program still matches the interpreter; the same file without layout_regions gives
  // the untuned code.
  const std::string modelKey = [&] {
    const fs::path f = tempDir() / "regions-key.json";
    cpu::CompileOptions t = o;
    t.tune = true;
    t.tuningFile = f.string();
    cpu::generateModel(*m.model, t);
    return readJson(f).at("model").get<std::string>();
  }();
  auto compileWith = [&](const nlohmann::json& file, const std::string& name) {
    const fs::path f = tempDir() / (name + ".json");
    std::ofstream(f) << file.dump();
    cpu::CompileOptions t = o;
    t.tuningFile = f.string();
    return cpu::generateModel(*m.model, t);
  };
  const cpu::GeneratedModel untuned = cpu::generateModel(*m.model, o);
  const cpu::GeneratedModel same = compileWith({{"model", modelKey}, {"conv_kernels", nlohmann::json::object()}}, "same");
  const nlohmann::json flipFile = {
      {"model", modelKey}, {"conv_kernels", nlohmann::json::object()}, {"layout_regions", {{"c1", "nchw"}}}};
  const cpu::GeneratedModel flipped = compileWith(flipFile, "flipped");
  EXPECT_EQ(same.source, untuned.source);
  EXPECT_NE(flipped.source, untuned.source);
  size_t blockedConvCalls = 0, flippedBlockedCalls = 0;
  for (const rt::Conv2dKernel& k : rt::conv2d_kernels())
    if (k.layout == rt::ConvLayout::NCHWc8) {
      blockedConvCalls += calls(untuned.source, k.name);
      flippedBlockedCalls += calls(flipped.source, k.name);
    }
  EXPECT_EQ(blockedConvCalls, 3u);
  EXPECT_EQ(flippedBlockedCalls, 2u);

  const fs::path flipFilePath = tempDir() / "flipped.json";
  cpu::CompileOptions t = o;
  t.tuningFile = flipFilePath.string();
  const fs::path so = tempDir() / "regions-flipped.so";
  cpu::compileSharedLibrary(*m.model, so.string(), t);
  std::map<std::string, Tensor> inputs = {{"x", randomTensor({1, 8, 16, 16}, 3)}};
  TwoRegionModel fresh;
  const Tensor expected = Interpreter(fresh.g).run(inputs).at(0);
  const Tensor actual = cpu::CompiledModel(so.string(), 1).run(inputs).at(0);
  expectMatches(actual, expected, so.string());
}

/// Vector lanes the tuner reports when the model is compiled for `march`, through the report and the
/// tuning file (both must agree).
int tunerLanes(const std::string& march) {
  TuneModel m;
  cpu::CompileOptions o;
  o.layout = "nchw";  // the same jobs on every host
  cpu::prepareModel(*m.model, o);
  o.tune = true;
  o.march = march;
  o.tuningFile = (tempDir() / ("lanes-" + march + ".json")).string();
  cpu::GeneratedModel g = cpu::generateModel(*m.model, o);
  nlohmann::json j = readJson(o.tuningFile);
  EXPECT_EQ(j.at("tuner").at("march"), march);
  EXPECT_EQ(j.at("tuner").at("vector_lanes").get<int>(), g.report.tunerVectorLanes) << march;
  return g.report.tunerVectorLanes;
}

TEST(CpuTune, TunerIsBuiltForTheModelsMarch) {
  // haswell has AVX2 and no AVX-512: 8 lanes, whatever the machine.
  EXPECT_EQ(tunerLanes("haswell"), 8);
  // native: 16 lanes exactly when this CPU has AVX-512F (asked of the CPU here, not of the runtime).
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f");
  // (tessel's own runtime, which --tune used to time, is AVX2-only: 8 lanes.)
  EXPECT_EQ(tunerLanes("native"), avx512 ? 16 : 8);
}

TEST(CpuTune, BadMarchIsOneUserError) {
  TuneModel m;
  cpu::CompileOptions o;
  o.layout = "nchw";
  cpu::prepareModel(*m.model, o);
  o.tune = true;
  o.march = "no-such-cpu";
  EXPECT_THROW(cpu::generateModel(*m.model, o), UserError);
}

}  // namespace
}  // namespace tessel
