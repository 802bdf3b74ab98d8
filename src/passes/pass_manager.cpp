// Pass registry and the pipeline runner with --print-after / --verify-each / --stop-after support.
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <iostream>

#include "tessel/ir/text.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/passes/pass.h"

namespace tessel {

PassRegistry& PassRegistry::instance() {
  static PassRegistry registry;
  return registry;
}

void PassRegistry::add(PassInfo info) {
  TESSEL_ASSERT(!passes_.count(info.name), "pass '" + info.name + "' registered twice");
  passes_[info.name] = std::move(info);
}

const PassInfo* PassRegistry::find(const std::string& name) const {
  auto it = passes_.find(name);
  return it == passes_.end() ? nullptr : &it->second;
}

std::vector<const PassInfo*> PassRegistry::all() const {
  std::vector<const PassInfo*> out;
  for (const auto& [n, p] : passes_) out.push_back(&p);
  return out;
}

namespace {
std::string knownPasses() {
  std::vector<std::string> names;
  for (const PassInfo* p : PassRegistry::instance().all()) names.push_back(p->name);
  return fmt::format("{}", fmt::join(names, ", "));
}
}  // namespace

PassPipeline::PassPipeline(std::vector<std::string> names) : names_(std::move(names)) {
  for (const auto& n : names_)
    if (!PassRegistry::instance().find(n))
      throw UserError(fmt::format("unknown pass '{}' (known passes: {})", n, knownPasses()));
}

PassPipeline PassPipeline::parse(const std::string& commaSeparated) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= commaSeparated.size()) {
    size_t comma = commaSeparated.find(',', start);
    std::string n = commaSeparated.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!n.empty()) names.push_back(n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return PassPipeline(std::move(names));
}

void PassPipeline::run(Model& model, const PassOptions& options, const PipelineDebugOptions& debug) const {
  auto inPipeline = [&](const std::string& n) { return std::find(names_.begin(), names_.end(), n) != names_.end(); };
  for (const auto& n : debug.printAfter)
    if (!inPipeline(n))
      throw UserError(fmt::format("--print-after={}: that pass is not in the pipeline ({})", n, fmt::join(names_, ",")));
  if (!debug.stopAfter.empty() && !inPipeline(debug.stopAfter))
    throw UserError(fmt::format("--stop-after={}: that pass is not in the pipeline ({})", debug.stopAfter, fmt::join(names_, ",")));
  std::ostream& dump = debug.dump ? *debug.dump : std::cerr;
  for (const auto& name : names_) {
    const PassInfo* info = PassRegistry::instance().find(name);
    auto pass = info->factory();
    auto start = std::chrono::steady_clock::now();
    bool changed = pass->run(model, options);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (debug.timing)
      fmt::print(dump, "pass {:<24} {:8.2f} ms  {}\n", name, ms, changed ? "changed" : "unchanged");
    if (debug.verifyEach) {
      try {
        verifyOrThrow(*model.graph);
        model.graph->topoSort();
        inferShapes(*model.graph);
      } catch (const UserError& e) {
        throw InternalError(fmt::format("the graph is invalid after pass '{}': {}", name, e.what()));
      }
    }
    if (debug.printAfterAll || std::find(debug.printAfter.begin(), debug.printAfter.end(), name) != debug.printAfter.end())
      fmt::print(dump, "// ----- IR after {} -----\n{}", name, printGraphText(*model.graph));
    if (name == debug.stopAfter) break;
  }
}

}  // namespace tessel
