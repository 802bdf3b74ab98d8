// `tessel disasm`: prints a compiled NPU model's contents: configuration, I/O, DRAM layout, and each
// subgraph's instruction stream with the graph node each instruction range came from.
#include <fmt/format.h>

#include "command.h"
#include "npu_cli.h"
#include "tessel/eval/runner.h"
#include "tessel/ir/text.h"

namespace tessel::cli {
namespace {

struct DisasmOptions {
  std::string path, hw;
  bool summaryOnly = false;
  bool cpuPart = false;
};

void disasmCommand(const DisasmOptions& o) {
  npu::CompiledNpuModel m = eval::readNpuArtifact(o.path, o.hw);
  fmt::print("; {}: compiled for configuration '{}' (hash {})\n", o.path, m.config.name(), m.config.hashHex());
  for (const auto& in : m.inputs) fmt::print("; input  {}: {}[{}]\n", in.name, dtypeName(in.dtype), shapeToString(in.shape));
  for (const auto& out : m.outputs) fmt::print("; output {}: {}[{}]\n", out.name, dtypeName(out.dtype), shapeToString(out.shape));
  if (o.cpuPart) fmt::print("; CPU part:\n{}", printGraphText(*m.cpuPart->graph));
  for (const auto& s : m.subgraphs) {
    fmt::print("\nsubgraph {} on {}: {} instructions, DRAM {} words ({} words of constants)\n", s.name, s.device,
               s.program.instructions.size(), s.dramWords, s.constants.size());
    for (const auto& t : s.inputs) fmt::print("  in  {} {} at word {} ({} words{})\n", t.name, shapeToString(t.shape), t.addr, t.words, t.channelsLast ? ", NHWC" : "");
    for (const auto& t : s.outputs) fmt::print("  out {} {} at word {} ({} words{})\n", t.name, shapeToString(t.shape), t.addr, t.words, t.channelsLast ? ", NHWC" : "");
    for (const auto& op : s.ops) fmt::print("; {} ({}): {} instructions {}\n", op.node, op.opType, op.instructions, op.tiling);
    if (o.summaryOnly) continue;
    // Scheduled programs interleave the nodes' instructions: each line names its node.
    for (size_t i = 0; i < s.program.instructions.size(); ++i)
      fmt::print("{:>7}  {:<70} ; {}\n", i, npu::disassemble(s.program.instructions[i]), s.ops[s.instructionOp[i]].node);
  }
}

}  // namespace

TESSEL_REGISTER_COMMAND(disasm, 46, [](CLI::App& app) {
  auto o = std::make_shared<DisasmOptions>();
  CLI::App* cmd = app.add_subcommand("disasm", "Print a compiled NPU model (.tnpu): layout and instruction streams");
  cmd->add_option("model", o->path, "compiled NPU model (.tnpu)")->required();
  cmd->add_option("--hw", o->hw, "refuse the file unless it was compiled for this configuration");
  cmd->add_flag("--summary", o->summaryOnly, "list the nodes and their instruction ranges only");
  cmd->add_flag("--cpu-part", o->cpuPart, "also print the CPU part (text IR)");
  cmd->callback([o]() { disasmCommand(*o); });
});

}  // namespace tessel::cli
