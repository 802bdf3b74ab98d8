// `tessel ir`: converts a model (ONNX or text IR) to the text IR, with large constants in a side file.
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "tessel/ir/text.h"

namespace tessel::cli {
namespace {

struct IrOptions {
  ModelOptions model;
  std::string output;
  bool noInference = false;
};

void irCommand(const IrOptions& o) {
  // The text IR keeps undefined dimensions as the model declares them.
  auto model = o.model.load(o.noInference ? InferenceMode::Off : InferenceMode::Strict, {}, /*keepOpenDims=*/true);
  if (o.output.empty() || o.output == "-") {
    fmt::print("{}", printModelText(*model));  // every constant inline: complete, but long for big models
    return;
  }
  writeModelTextFile(*model, o.output);
}

}  // namespace

TESSEL_REGISTER_COMMAND(ir, 20, [](CLI::App& app) {
  auto opts = std::make_shared<IrOptions>();
  CLI::App* cmd = app.add_subcommand("ir", "Convert a model to Tessel's text IR (.tir); text IR in, text IR out");
  cmd->footer(
      "Large constants go to a side file FILE.tir.bin next to FILE.tir; the text refers to it by offset.\n"
      "The grammar is documented in docs/ir.md. Example: tessel ir resnet50.onnx -o resnet50.tir");
  opts->model.addTo(cmd);
  cmd->add_option("-o,--output", opts->output, "output .tir file (default: print to stdout, constants inline)");
  cmd->add_flag("--no-infer", opts->noInference, "do not run shape inference (keep the types as written)");
  cmd->callback([opts]() { irCommand(*opts); });
});

}  // namespace tessel::cli
