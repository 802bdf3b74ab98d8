// Tests of what `tessel compare` and the CLI's input handling rest on: output comparison (tolerance rule, worst
// element, NaN), input completion, .npz archives, undefined input dimensions, tuning-file validation, and the
// Conv whose kernel does not fit its padded input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "tessel/eval/compare.h"
#include "tessel/eval/inputs.h"
#include "tessel/frontend/onnx_importer.h"
#include "tessel/frontend/tensor_io.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/tuner.h"

namespace {

using namespace tessel;
namespace fs = std::filesystem;

Tensor floats(const Shape& shape, std::vector<float> values) {
  Tensor t(DType::Float32, shape);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

TEST(Compare, EqualOutputsPass) {
  Tensor a = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  eval::OutputComparison c = eval::compareTensors("y", a, a, {});
  EXPECT_TRUE(c.pass);
  EXPECT_EQ(c.mismatches, 0);
  EXPECT_EQ(c.maxAbsError, 0);
  EXPECT_EQ(c.elements, 6);
}

TEST(Compare, ToleranceIsAtolPlusRtolTimesExpected) {
  Tensor expected = floats({4}, {0, 100, 0, 100});
  Tensor actual = floats({4}, {1e-3f, 100.0005f, 0, 100});  // errors 1e-3 at 0, about 5e-4 at 100
  EXPECT_TRUE(eval::compareTensors("y", expected, actual, {1.1e-3, 1e-5}).pass);
  // atol 1e-4, rtol 1e-5: 1.1e-3 allowed at 100 (passes), 1e-4 at 0 (fails).
  eval::OutputComparison tight = eval::compareTensors("y", expected, actual, {1e-4, 1e-5});
  EXPECT_FALSE(tight.pass);
  EXPECT_EQ(tight.mismatches, 1);
  EXPECT_EQ(tight.worstIndex, (Shape{0}));
  EXPECT_NEAR(tight.maxAbsError, 1e-3, 1e-6);
  EXPECT_NEAR(tight.maxRelError, 5e-6, 1e-7);  // only elements with a non-zero expected value
  // rtol alone: 5e-4 at 100 needs rtol >= 5e-6.
  EXPECT_FALSE(eval::compareTensors("y", floats({1}, {100}), floats({1}, {100.0005f}), {0, 4e-6}).pass);
  EXPECT_TRUE(eval::compareTensors("y", floats({1}, {100}), floats({1}, {100.0005f}), {0, 6e-6}).pass);
}

TEST(Compare, WorstElementIsFurthestOutsideTheTolerances) {
  Tensor expected(DType::Float32, {2, 3, 4});
  for (int64_t i = 0; i < expected.numel(); ++i) expected.data<float>()[i] = static_cast<float>(i);
  Tensor actual = expected.clone();
  actual.data<float>()[1 * 12 + 2 * 4 + 3] += 1e-3f;  // index [1, 2, 3]
  actual.data<float>()[5] += 2e-4f;
  eval::OutputComparison c = eval::compareTensors("y", expected, actual, {1e-5, 1e-5});
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.mismatches, 2);
  EXPECT_EQ(c.worstIndex, (Shape{1, 2, 3}));
  EXPECT_EQ(c.worstExpected, 23);
  EXPECT_NEAR(c.worstActual - c.worstExpected, 1e-3, 1e-5);
}

TEST(Compare, NanMatchesOnlyNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(eval::compareTensors("y", floats({2}, {nan, 1}), floats({2}, {nan, 1}), {}).pass);
  eval::OutputComparison c = eval::compareTensors("y", floats({2}, {1, 1}), floats({2}, {nan, 1}), {});
  EXPECT_FALSE(c.pass);
  EXPECT_TRUE(std::isinf(c.maxAbsError));
  EXPECT_EQ(c.worstIndex, (Shape{0}));
  EXPECT_TRUE(eval::toJson(c)["max_abs_error"].is_null());
}

TEST(Compare, ShapeDtypeAndMissingOutputsFail) {
  eval::OutputComparison shape = eval::compareTensors("y", floats({2}, {1, 2}), floats({1, 2}, {1, 2}), {});
  EXPECT_FALSE(shape.pass);
  EXPECT_NE(shape.problem.find("f32[2]"), std::string::npos) << shape.problem;
  std::vector<eval::OutputComparison> r =
      eval::compareOutputs({"y", "z"}, {floats({1}, {1}), floats({1}, {2})}, {"y"}, {floats({1}, {1})}, {});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].pass);
  EXPECT_FALSE(r[1].pass);
  EXPECT_NE(r[1].problem.find("no output 'z'"), std::string::npos);
}

TEST(Inputs, CompletedWithSeededRandomsAndChecked) {
  Graph g;
  g.addInput("x", TensorType::fromShape(DType::Float32, {2, 3}));
  g.addInput("ids", TensorType::fromShape(DType::Int64, {4}));
  auto a = eval::completeInputs(g, {{"x", floats({2, 3}, {1, 2, 3, 4, 5, 6})}}, 7);
  auto b = eval::completeInputs(g, {}, 7);
  EXPECT_EQ(a.at("x").data<float>()[5], 6);
  EXPECT_TRUE(a.at("ids").identical(b.at("ids")));  // same seed, same random input
  EXPECT_FALSE(b.at("x").identical(eval::completeInputs(g, {}, 8).at("x")));
  EXPECT_THROW(eval::completeInputs(g, {{"nope", floats({1}, {1})}}, 0), UserError);
  EXPECT_THROW(eval::completeInputs(g, {{"x", floats({3, 2}, {1, 2, 3, 4, 5, 6})}}, 0), UserError);
  EXPECT_THROW(eval::completeInputs(g, {{"x", floats({2}, {1, 2})}}, 0), UserError);
}

TEST(Npz, RoundTripsAndRefusesDamage) {
  fs::path dir = fs::temp_directory_path() / ("tessel-npz-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Tensor ids(DType::Int64, {3});
  for (int64_t i = 0; i < 3; ++i) ids.data<int64_t>()[i] = 10 * i - 7;
  std::vector<NamedTensor> arrays{{"image", floats({1, 2}, {0.5f, -1})}, {"ids", ids}};
  std::string path = (dir / "a.npz").string();
  writeNpz(path, arrays);
  std::vector<NamedTensor> back = readNpz(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].first, "image");
  EXPECT_TRUE(back[0].second.identical(arrays[0].second));
  EXPECT_EQ(back[1].first, "ids");
  EXPECT_TRUE(back[1].second.identical(ids));
  EXPECT_TRUE(readTensorFile(path, "ids").identical(ids));
  EXPECT_THROW(readTensorFile(path, "other"), UserError);  // two arrays, none of that name
  // A flipped byte in a member's data fails its CRC; a truncated archive has no central directory.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = bytes;
  flipped[bytes.find("NUMPY") + 130] ^= 0x5a;
  std::ofstream(dir / "flipped.npz", std::ios::binary) << flipped;
  std::ofstream(dir / "short.npz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(readNpz((dir / "flipped.npz").string()), UserError);
  EXPECT_THROW(readNpz((dir / "short.npz").string()), UserError);
  fs::remove_all(dir);
}

std::unique_ptr<Graph> symbolicBatchGraph() {
  auto g = std::make_unique<Graph>();
  Value* x = g->addInput("x", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("N"), Dim::known(4)}));
  g->addOutput(g->addNode("Relu", {x}, {"y"}, "relu")->output(0));
  return g;
}

TEST(UndefinedDims, DefaultToOneWithOneNote) {
  auto g = symbolicBatchGraph();
  std::vector<std::string> notes;
  ImportOptions o;
  o.defaultDimValue = 1;
  o.note = [&](const std::string& n) { notes.push_back(n); };
  fixOpenInputDims(*g, o);
  EXPECT_EQ(g->inputs()[0]->type.staticShape(), (Shape{1, 4}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("'N' (axis 0)"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("--input-shape x:1x4"), std::string::npos) << notes[0];
}

TEST(UndefinedDims, GivenTensorShapesWinAndMismatchesAreLeftToTheInputCheck) {
  auto g = symbolicBatchGraph();
  ImportOptions o;
  o.defaultDimValue = 1;
  o.givenInputShapes = {{"x", {360, 4}}};
  fixOpenInputDims(*g, o);
  EXPECT_EQ(g->inputs()[0]->type.staticShape(), (Shape{360, 4}));
  auto h = symbolicBatchGraph();
  o.givenInputShapes = {{"x", {360, 5}}};  // axis 1 is fixed to 4: not applied, the interpreter will say why
  fixOpenInputDims(*h, o);
  EXPECT_FALSE(h->inputs()[0]->type.isStatic());
}

TEST(TuningFile, KnownKernelsOnly) {
  const std::string key = "1 8 16 16 8 3 3 1 1 1 1 1 1 1 1 1";
  auto file = [&](const std::string& model, const std::string& kernel) {
    return "{\"model\": \"" + model + "\", \"conv_kernels\": {\"" + key + "\": \"" + kernel + "\"}}";
  };
  auto ok = cpu::parseTuningFile(file("abc", "conv2d_nchw_im2col_gemm_avx2"), "t.json", "abc");
  EXPECT_EQ(ok.kernels.at(key), "conv2d_nchw_im2col_gemm_avx2");
  auto message = [&](const std::string& text) {
    try {
      cpu::parseTuningFile(text, "t.json", "abc");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message(file("abc", "conv2d_frobnicate")).find("'conv2d_frobnicate'"), std::string::npos);
  EXPECT_NE(message(file("abd", "conv2d_nchw_im2col_gemm_avx2")).find("another model"), std::string::npos);
  EXPECT_NE(message("{\"model\": \"abc\", \"conv_kernels\": {\"1 2\": \"x\"}}").find("not a conv geometry"),
            std::string::npos);
  EXPECT_NE(message("{\"model\": \"abc\", \"conv_kernels\": [1]}").find("must be an object"), std::string::npos);
  EXPECT_NE(message("[]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(message("{").find("not valid JSON"), std::string::npos);
  // Layout regions (records of tessel tune --target cpu): nchw or nchwc8 only.
  const std::string kernels = "\"conv_kernels\": {}";
  auto layouts = cpu::parseTuningFile("{\"model\": \"abc\", " + kernels + ", \"layout_regions\": {\"conv1\": \"nchwc8\", "
                                      "\"conv7\": \"nchw\"}}",
                                      "t.json", "abc");
  EXPECT_EQ(layouts.layouts, (std::map<std::string, std::string>{{"conv1", "nchwc8"}, {"conv7", "nchw"}}));
  EXPECT_TRUE(layouts.kernels.empty());
  EXPECT_NE(message("{\"model\": \"abc\", " + kernels + ", \"layout_regions\": {\"conv1\": \"nhwc\"}}")
                .find("layout_regions['conv1'] is \"nhwc\", expected"),
            std::string::npos);
  EXPECT_NE(message("{\"model\": \"abc\", " + kernels + ", \"layout_regions\": [\"conv1\"]}").find("must be an object"),
            std::string::npos);
}

TEST(ConvShape, KernelLargerThanPaddedInputIsAUserError) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 1, 3, 3}));
  Value* w = g.addConstant("w", Tensor(DType::Float32, {2, 1, 5, 5}));
  g.addNode("Conv", {x, w}, {"y"}, "bigk");
  try {
    inferShapes(g);
    FAIL() << "a 5x5 kernel over a 3x3 input inferred a shape";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'bigk'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("larger than the padded input"), std::string::npos) << e.what();
  }
  g.nodes()[0]->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});  // 3 + 2 = 5: one output pixel
  inferShapes(g);
  EXPECT_EQ(g.findValue("y")->type.staticShape(), (Shape{1, 2, 1, 1}));
}

}  // namespace
