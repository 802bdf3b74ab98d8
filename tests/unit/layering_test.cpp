// The source tree keeps its layers: only the cpu target (and the CLI above it) includes the runtime, nothing
// below the CLI includes it, passes / partitioner / cpu target compare no op names (isOp, traits), the CLI
// has no target-name branches (it asks the target registry), and no list of activation ops exists outside
// the registry (the registry says which ops are activations).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tessel/ops/registry.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = TESSEL_SOURCE_DIR;

struct SourceFile {
  std::string path;  ///< relative to the repository root
  std::string code;  ///< without // comments
};

/// The C++ files under the given folders of the repository, with their line comments removed.
std::vector<SourceFile> sources(const std::vector<std::string>& folders) {
  std::vector<SourceFile> out;
  for (const std::string& folder : folders) {
    for (const auto& e : fs::recursive_directory_iterator(kRoot / folder)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      std::ifstream in(e.path());
      std::string line, code;
      while (std::getline(in, line)) code += line.substr(0, line.find("//")) + "\n";
      out.push_back({fs::relative(e.path(), kRoot).string(), code});
    }
  }
  EXPECT_FALSE(out.empty()) << "no sources found under " << kRoot;
  return out;
}

bool under(const std::string& path, const std::string& folder) { return path.rfind(folder, 0) == 0; }

/// "path:line: text" of every line of `f` matching `re`.
std::vector<std::string> matches(const SourceFile& f, const std::regex& re) {
  std::vector<std::string> out;
  std::istringstream lines(f.code);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n)
    if (std::regex_search(line, re)) out.push_back(f.path + ":" + std::to_string(n) + ": " + line);
  return out;
}

TEST(Layering, OnlyTheCpuTargetIncludesTheRuntime) {
  const std::regex include(R"(#include\s+"tessel/rt/)");
  for (const SourceFile& f : sources({"src", "include"})) {
    if (under(f.path, "src/targets/cpu/") || under(f.path, "include/tessel/targets/cpu/")) continue;
    for (const std::string& m : matches(f, include)) ADD_FAILURE() << "the runtime is the cpu target's: " << m;
  }
}

TEST(Layering, NothingBelowTheCliDependsOnIt) {
  const std::regex include(R"(#include\s+["<](CLI/|tools/|command\.h|common\.h|npu_cli\.h|compiled_model_cli\.h))");
  for (const SourceFile& f : sources({"src", "include"}))
    for (const std::string& m : matches(f, include)) ADD_FAILURE() << "a CLI header below the CLI: " << m;
}

TEST(Layering, PassesPartitionerAndCpuTargetCompareNoOpNames) {
  // opType() == "Relu", op != "Conv" (op holding an opType): one-op rewrites use isOp, classes of ops traits.
  const std::regex comparison(R"(opType\(\)\s*[!=]=|\bop\s*[!=]=\s*")");
  for (const SourceFile& f : sources({"src/passes", "src/partition", "src/targets/cpu"}))
    for (const std::string& m : matches(f, comparison)) ADD_FAILURE() << "ask the registry: " << m;
}

TEST(Layering, NpuLoweringComparesNoOpNames) {
  // The NPU's lowering asks isOp / the registry / its ISA (vectorOpOf). Files still comparing, with the work
  // that removes it (the list only shrinks: an entry without a comparison fails too). The schedule's files
  // are the scheduler's own business for now.
  const std::map<std::string, std::string> pending = {
      {"src/targets/npu/lower_conv.cpp", "the conv lowering's rewrite (kept apart from issue 14's branch)"}};
  const std::regex comparison(R"(opType\(\)\s*[!=]=)");
  for (const SourceFile& f : sources({"src/targets/npu"})) {
    if (under(f.path, "src/targets/npu/schedule/")) continue;
    const std::vector<std::string> found = matches(f, comparison);
    if (auto p = pending.find(f.path); p != pending.end()) {
      EXPECT_FALSE(found.empty()) << f.path << " compares no op names any more: drop it from `pending`";
      continue;
    }
    for (const std::string& m : found) ADD_FAILURE() << "ask the registry (isOp, traits): " << m;
  }
}

TEST(Layering, TheCliReachesTargetsThroughTheRegistry) {
  // target == "cpu", kind != "npu": the CLI asks the target registry (tessel/targets/target.h) instead, so a new
  // target needs no change in tools/.
  const std::regex branch(R"re([!=]=\s*"(cpu|npu|ref)"|"(cpu|npu|ref)"\s*[!=]=)re");
  for (const SourceFile& f : sources({"tools"}))
    for (const std::string& m : matches(f, branch)) ADD_FAILURE() << "a target-name branch in the CLI: " << m;
}

TEST(Layering, NoActivationListOutsideTheRegistry) {
  std::set<std::string> activations;
  for (const OpDef* def : opsWithTrait(OpTrait::Activation)) activations.insert(def->name);
  ASSERT_GE(activations.size(), 10u);
  // Files that still keep their own list, each with the work that removes it; an entry whose file has no
  // list any more fails too, so the list only shrinks.
  const std::map<std::string, std::string> pending = {};
  const std::regex quoted(R"re("([A-Za-z]+)")re");
  for (const SourceFile& f : sources({"src", "include", "tools"})) {
    if (under(f.path, "src/ops/") || under(f.path, "include/tessel/ops/")) continue;
    std::set<std::string> named;
    for (std::sregex_iterator it(f.code.begin(), f.code.end(), quoted), end; it != end; ++it)
      if (activations.count((*it)[1].str())) named.insert((*it)[1].str());
    const bool list = named.size() >= 2;
    if (auto p = pending.find(f.path); p != pending.end()) {
      EXPECT_TRUE(list) << f.path << " has no activation list any more: drop it from `pending`";
      continue;
    }
    EXPECT_FALSE(list) << f.path << " names the activations " << ::testing::PrintToString(named)
                       << ": ask the registry (OpTrait::Activation, FusibleEpilogue)";
  }
}

}  // namespace
}  // namespace tessel
