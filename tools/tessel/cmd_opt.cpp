// `tessel opt`: runs graph passes on a model and writes the text IR (for pass development and debugging).
#include <fmt/format.h>
#include <iostream>

#include "command.h"
#include "common.h"
#include "tessel/ir/text.h"
#include "tessel/passes/pass.h"
#include "tessel/targets/target.h"

namespace tessel::cli {
namespace {

struct OptOptions {
  ModelOptions model;
  std::string passes;
  std::string pipeline = "cleanup";
  std::string output;
  PipelineDebugOptions debug;
  bool listPasses = false;
};

void optCommand(OptOptions& o) {
  if (o.listPasses) {
    for (const PassInfo* p : PassRegistry::instance().all()) fmt::print("{:<28} {}\n", p->name, p->description);
    fmt::print("\npipelines: {}\n", fmt::join(pipelineNames(), ", "));
    fmt::print("targets (--pipeline NAME runs the pipeline the target compiles with): {}\n",
               fmt::join(target::TargetRegistry::instance().names(), ", "));
    return;
  }
  if (o.model.path.empty()) throw UserError("tessel opt: a MODEL is required (or --list-passes)");
  // A target's name runs the pipeline that target compiles with, options included (cpu: those of tessel compile
  // without flags); other names are the plain lists of src/passes/pipelines.cpp.
  const target::Target* t = target::TargetRegistry::instance().find(o.pipeline);
  Pipeline pipeline = !o.passes.empty() ? Pipeline{"", PassPipeline::parse(o.passes), {}}
                      : t                ? t->pipeline({})
                                         : namedPipeline(o.pipeline);
  auto model = o.model.load(InferenceMode::Strict);
  pipeline.run(*model, o.debug);
  if (o.output.empty() || o.output == "-") fmt::print("{}", printGraphText(*model->graph));
  else writeModelTextFile(*model, o.output);
}

}  // namespace

TESSEL_REGISTER_COMMAND(opt, 25, [](CLI::App& app) {
  auto o = std::make_shared<OptOptions>();
  CLI::App* cmd = app.add_subcommand("opt", "Run graph passes on a model and print or save the text IR");
  cmd->footer(
      "Examples:\n"
      "  tessel opt model.onnx --passes infer-shapes,dce -o out.tir\n"
      "  tessel opt model.tir --pipeline cpu --print-after=dce --verify-each\n"
      "  tessel opt --list-passes");
  o->model.addTo(cmd, "model file (.onnx or .tir)", /*required=*/false);
  cmd->add_option("--passes", o->passes, "comma-separated passes to run, in order");
  cmd->add_option("--pipeline", o->pipeline, "a named pipeline (when --passes is not given)")->default_val("cleanup");
  cmd->add_option("-o,--output", o->output, "write the result as text IR (.tir) instead of printing it");
  cmd->add_option("--print-after", o->debug.printAfter, "print the IR after this pass (repeatable)")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_flag("--print-after-all", o->debug.printAfterAll, "print the IR after every pass");
  cmd->add_flag("--verify-each", o->debug.verifyEach, "verify the graph after every pass");
  cmd->add_option("--stop-after", o->debug.stopAfter, "stop the pipeline after this pass");
  cmd->add_flag("--time-passes", o->debug.timing, "print each pass's time and whether it changed the graph");
  cmd->add_flag("--list-passes", o->listPasses, "list the registered passes and pipelines");
  cmd->callback([o]() { optCommand(*o); });
});

}  // namespace tessel::cli
