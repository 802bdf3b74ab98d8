// `tessel partition`: places every node of a model on a device of a hardware configuration, prints why
// (text or --json), and writes the partitioned graph as Graphviz, as a rendered picture and/or text IR (S4.2).
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "plot.h"
#include "tessel/eval/runner.h"
#include "tessel/hw/hardware_config.h"
#include "tessel/ir/text.h"
#include "tessel/partition/partitioner.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/target.h"

namespace tessel::cli {
namespace {

struct PartitionCmdOptions {
  ModelOptions model;
  std::string hw;
  std::string dot;
  std::string render;
  std::string emitIr;
  bool quiet = false;
  bool json = false;
};

void writeTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot write '{}'", path));
  f << text;
  if (!f) throw UserError(fmt::format("cannot write '{}'", path));
}

void partitionCommand(const PartitionCmdOptions& o) {
  if (!o.render.empty()) checkPictureOutput("--render", o.render);
  hw::HardwareConfig config = hw::HardwareConfig::load(eval::findHardwareConfig(o.hw));
  auto model = o.model.load(InferenceMode::Strict);
  npu::prepareModelForNpu(*model);
  partition::PartitionOptions popts;
  popts.canLower = target::loweringCheck();
  partition::PartitionResult result = partition::partitionGraph(*model->graph, config, popts);
  if (o.json) fmt::print("{}\n", partition::placementJson(result, config, o.model.path).dump());
  else if (!o.quiet) fmt::print("{}", partition::placementTable(result));
  if (!o.dot.empty()) writeTextFile(o.dot, partition::partitionDot(*model->graph));
  if (!o.render.empty()) renderDot(partition::partitionDot(*model->graph), o.render);
  if (!o.emitIr.empty()) writeModelTextFile(*model, o.emitIr);
}

}  // namespace

TESSEL_REGISTER_COMMAND(partition, 27, [](CLI::App& app) {
  auto o = std::make_shared<PartitionCmdOptions>();
  CLI::App* cmd = app.add_subcommand("partition", "Place every node on a device of a hardware configuration and explain why");
  cmd->footer(
      "Examples:\n"
      "  tessel partition resnet18.onnx --hw default --dot parts.dot --emit-ir parts.tir\n"
      "  tessel partition resnet18.onnx --hw default --render parts.svg   (Graphviz picture, a colour per device)\n"
      "  tessel partition mobilenet.onnx --hw configs/no-grouped-conv.json --json\n"
      "Exit status: 0 success, 2 bad model / configuration, 1 internal error.");
  o->model.addTo(cmd);
  cmd->add_option("--hw", o->hw, "hardware configuration: a JSON file (docs/hardware-config.md) or a name (default, tiny, ...)")
      ->required();
  cmd->add_option("--dot", o->dot, "write the partitioned graph as Graphviz to this file");
  cmd->add_option("--render", o->render,
                  "draw the partitioned graph with Graphviz's dot into this .svg, .png or .pdf (needs graphviz)")
      ->type_name("FILE");
  cmd->add_option("--emit-ir", o->emitIr, "write the partitioned graph as text IR (.tir) to this file");
  cmd->add_flag("--quiet,-q", o->quiet, "do not print the placement table");
  cmd->add_flag("--json", o->json, "print the placements as one JSON object (keys: docs/cli.md) instead of the table");
  cmd->callback([o]() { partitionCommand(*o); });
});

}  // namespace tessel::cli
