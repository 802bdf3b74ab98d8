// cpu target: one pipeline definition, options included, serves `tessel compile` (cpu::prepareModel) and
// `tessel opt --pipeline cpu` (namedPipeline("cpu")): the IR opt prints is the IR compile generates code from.
#include <gtest/gtest.h>

#include <cstring>

#include "tessel/ir/text.h"
#include "tessel/passes/pass.h"
#include "tessel/targets/cpu/compiler.h"

namespace tessel {
namespace {

// A dense 1x1 region (blocked in NCHWc8 only by --layout nchwc8) and a depthwise one (blocked by nchwc8,
// and by auto on a CPU without AVX-512), with shapes whose kernel choice depends on AVX-512.
const char* kNet = R"(tessel.model opset{"": 13}
graph @main(%x: f32[1,16,12,12]) -> (%y: f32[1,24], %z: f32[1,16,12,12]) {
  const %w1: f32[24,16,1,1] = @side(offset=0, bytes=1536)
  const %dw: f32[24,1,3,3] = @side(offset=1536, bytes=864)
  const %w2: f32[16,16,1,1] = @side(offset=2400, bytes=1024)
  %a = Conv(%x, %w1) {kernel_shape=[1, 1]} : f32[1,24,12,12]
  %r = Relu(%a) : f32[1,24,12,12]
  %b = Conv(%r, %dw) {group=24, kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[1,24,12,12]
  %p = GlobalAveragePool(%b) : f32[1,24,1,1]
  %y = Flatten(%p) : f32[1,24]
  %d = Conv(%x, %w2) {kernel_shape=[1, 1]} : f32[1,16,12,12]
  %e = Relu(%d) : f32[1,16,12,12]
  %z = Conv(%e, %w2) {kernel_shape=[1, 1]} : f32[1,16,12,12]
})";

std::unique_ptr<Model> net() {
  std::string side(3424, '\0');
  for (size_t i = 0; i < side.size() / 4; ++i) {
    const float v = static_cast<float>((i * 29) % 13) / 13.0f - 0.5f;
    std::memcpy(&side[i * 4], &v, 4);
  }
  return parseModelText(kNet, "net.tir", side);
}

TEST(CpuPipeline, OptPrintsTheIrCompileGeneratesCodeFrom) {
  auto compiled = net();
  cpu::prepareModel(*compiled, cpu::CompileOptions{});  // tessel compile MODEL (tools/tessel/cmd_compile.cpp)
  auto optimised = net();
  namedPipeline("cpu").run(*optimised);  // tessel opt MODEL --pipeline cpu (tools/tessel/cmd_opt.cpp)
  const std::string printed = printGraphText(*optimised->graph);
  EXPECT_EQ(printed, printGraphText(*compiled->graph));
  EXPECT_NE(printed.find("meta{kernel="), std::string::npos) << printed;  // the schedule decisions are in it
  // The printed model, read back, generates the program compile generates.
  std::string side;
  const std::string text = printModelText(*optimised, {}, &side, "net.opt.bin");
  auto reread = parseModelText(text, "net.opt.tir", side);
  EXPECT_EQ(cpu::generateModel(*reread, {}).report.hash, cpu::generateModel(*compiled, {}).report.hash);
}

TEST(CpuPipeline, CompileFlagsReachThePipelineOptions) {
  EXPECT_EQ(namedPipeline("cpu").options.values, cpu::passPipeline().options.values);
  cpu::CompileOptions blocked;
  blocked.layout = "nchwc8";
  const Pipeline pipeline = cpu::passPipeline(blocked);
  EXPECT_EQ(pipeline.name, "cpu");
  EXPECT_EQ(pipeline.options.values.at("select-layout.mode"), "nchwc8");
  EXPECT_EQ(pipeline.passes.names(), namedPipeline("cpu").passes.names());
  auto m = net();
  pipeline.run(*m);
  for (const char* name : {"a", "r", "b", "d", "e", "z"}) {
    const Node* n = m->graph->findNode(name);
    if (!n) continue;  // fused into a neighbour
    ASSERT_TRUE(n->meta.count("layout")) << name;
    EXPECT_EQ(std::get<std::string>(n->meta.at("layout")), "nchwc8") << name;
  }
  cpu::CompileOptions bad;
  bad.layout = "nhwc";
  EXPECT_THROW(cpu::passPipeline(bad), UserError);
}

TEST(CpuPipeline, NpuPipelineIsANamedList) {
  const Pipeline npu = namedPipeline("npu");
  EXPECT_EQ(npu.options.target, "npu");
  EXPECT_EQ(npu.passes.names().front(), "infer-shapes");
  EXPECT_THROW(namedPipeline("no-such-pipeline"), UserError);
}

}  // namespace
}  // namespace tessel
