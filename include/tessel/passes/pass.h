// Graph passes: one pass per file, registered by name; pipelines are plain lists of pass names.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel {

/// Settings that passes may read (target facts, what the user asked for).
struct PassOptions {
  std::string target = "cpu";  ///< "cpu", "npu", "ref"
  int threads = 1;
  /// Free-form per-pass options ("select-layout.block" = "8"), set from the CLI or the search.
  std::map<std::string, std::string> values;
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
};

/// A transformation of a model. Passes keep the graph valid (verifiable, topologically sorted, typed).
class Pass {
 public:
  virtual ~Pass() = default;
  /// Runs on the model; returns true when it changed anything.
  virtual bool run(Model& model, const PassOptions& options) = 0;
};

using PassFactory = std::function<std::unique_ptr<Pass>()>;

struct PassInfo {
  std::string name;         ///< kebab-case, as used on the CLI (--print-after=fold-constants)
  std::string description;  ///< one line for `tessel opt --list-passes`
  PassFactory factory;
};

/// Every registered pass.
class PassRegistry {
 public:
  static PassRegistry& instance();
  void add(PassInfo info);
  const PassInfo* find(const std::string& name) const;
  std::vector<const PassInfo*> all() const;

 private:
  std::map<std::string, PassInfo> passes_;
};

/// How a pipeline reports on itself.
struct PipelineDebugOptions {
  std::vector<std::string> printAfter;  ///< print the text IR after these passes
  bool printAfterAll = false;
  bool verifyEach = false;    ///< run the verifier (and shape inference) after every pass
  std::string stopAfter;      ///< stop after this pass
  std::ostream* dump = nullptr;  ///< where --print-after goes (default std::cerr)
  bool timing = false;           ///< print each pass's time and whether it changed the graph
};

/// An ordered list of passes, run one after the other (Halide's Lower.cpp style).
class PassPipeline {
 public:
  PassPipeline() = default;
  explicit PassPipeline(std::vector<std::string> names);
  /// Parses "a,b,c"; UserError naming an unknown pass and listing the known ones.
  static PassPipeline parse(const std::string& commaSeparated);
  const std::vector<std::string>& names() const { return names_; }
  /// Runs the passes. UserError when --print-after / --stop-after name a pass not in the pipeline.
  void run(Model& model, const PassOptions& options, const PipelineDebugOptions& debug = {}) const;

 private:
  std::vector<std::string> names_;
};

/// A pipeline with the options its passes run with, under one name: what a target compiles with and what
/// `tessel opt --pipeline NAME` runs, so the IR a user inspects is the IR the target generates code from.
struct Pipeline {
  std::string name;
  PassPipeline passes;
  PassOptions options;
  void run(Model& model, const PipelineDebugOptions& debug = {}) const { passes.run(model, options, debug); }
};

/// The options of a named pipeline for its target's default configuration, registered by that target
/// (the cpu target: the vector width of --march native, --layout auto, as `tessel compile` without flags).
using PipelineOptionsFn = std::function<PassOptions()>;
void registerPipelineOptions(const std::string& pipeline, PipelineOptionsFn options);

/// The named pipelines ("cleanup", "cpu", "npu"): the pass list of src/passes/pipelines.cpp with the
/// options its target registered (none: the passes' defaults). UserError for an unknown name.
Pipeline namedPipeline(const std::string& name);
/// The same list with the given options (a target compiling with its own flags).
Pipeline namedPipeline(const std::string& name, PassOptions options);
std::vector<std::string> pipelineNames();

}  // namespace tessel

/// Registers the options of a named pipeline (see registerPipelineOptions):
///   TESSEL_REGISTER_PIPELINE_OPTIONS(cpu, "cpu", [] { return ...; });
#define TESSEL_REGISTER_PIPELINE_OPTIONS(ident, pipeline, fn)                                            \
  [[maybe_unused]] static const bool tesselPipelineOptions_##ident =                                    \
      (::tessel::registerPipelineOptions(pipeline, fn), true)

/// Registers a pass: TESSEL_REGISTER_PASS(fold_constants, "fold-constants", "evaluate ...", [] { return ...; });
#define TESSEL_REGISTER_PASS(ident, name, description, factory)                                   \
  [[maybe_unused]] static const bool tesselPassRegistered_##ident =                                \
      (::tessel::PassRegistry::instance().add(::tessel::PassInfo{name, description, factory}), true)
