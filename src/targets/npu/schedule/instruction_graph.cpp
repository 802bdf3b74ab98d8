// The instruction dependency graph of a virtual program (S2.2-S2.4): dependencies from the shared analysis
// over virtual regions and DRAM, merged per instruction pair; critical-path heights and parallel levels.
#include <algorithm>
#include <fmt/format.h>

#include "instruction_scheduler.h"

namespace tessel::npu::sched {

InstructionGraph buildInstructionGraph(const VirtualProgram& program, const hw::NpuConfig& cfg) {
  const size_t n = program.instructions.size();
  InstructionGraph g;
  g.cost.resize(n);
  g.unit.resize(n);
  g.predOffset.assign(n + 1, 0);
  DependencyTracker tracker;
  std::vector<WordRun> runs;
  std::vector<DepEdge> mine;
  for (size_t j = 0; j < n; ++j) {
    const VirtualInstruction& vi = program.instructions[j];
    g.cost[j] = instructionCost(vi.inst, cfg);
    g.unit[j] = vi.inst.unit();
    runs.clear();
    instructionRuns(vi.inst, runs, true, &vi.region);
    mine.clear();
    tracker.visit(static_cast<uint32_t>(j), g.unit[j], runs, [&](const Dependency& d) {
      auto it = std::find_if(mine.begin(), mine.end(), [&](const DepEdge& e) { return e.other == d.producer; });
      if (it == mine.end()) {
        mine.push_back(DepEdge{d.producer, 0, false});
        it = mine.end() - 1;
      }
      it->kinds |= static_cast<uint8_t>(1u << static_cast<unsigned>(d.kind));
      if (d.kind == DepKind::ReadAfterWrite && d.consumerAccess == AccessKind::ReadAtStart) it->interlock = true;
    });
    g.preds.insert(g.preds.end(), mine.begin(), mine.end());
    g.predOffset[j + 1] = static_cast<uint32_t>(g.preds.size());
  }
  // Successor lists (the transpose).
  g.succOffset.assign(n + 1, 0);
  for (const DepEdge& e : g.preds) g.succOffset[e.other + 1]++;
  for (size_t i = 0; i < n; ++i) g.succOffset[i + 1] += g.succOffset[i];
  g.succs.resize(g.preds.size());
  std::vector<uint32_t> fill(g.succOffset.begin(), g.succOffset.end() - 1);
  for (size_t j = 0; j < n; ++j)
    for (const DepEdge* e = g.predBegin(j); e != g.predEnd(j); ++e) g.succs[fill[e->other]++] = DepEdge{static_cast<uint32_t>(j), e->kinds, e->interlock};
  // Heights: every dependency points backwards in program order, so a reverse walk is a topological one.
  g.height.assign(n, 0);
  for (size_t i = n; i-- > 0;) {
    uint64_t below = 0;
    for (const DepEdge* e = g.succBegin(i); e != g.succEnd(i); ++e) below = std::max(below, g.height[e->other]);
    g.height[i] = below + g.cost[i].latency;
  }
  g.level.assign(n, 0);
  for (size_t j = 0; j < n; ++j)
    for (const DepEdge* e = g.predBegin(j); e != g.predEnd(j); ++e) g.level[j] = std::max(g.level[j], g.level[e->other] + 1);
  return g;
}

std::string dependencyGraphDot(const VirtualProgram& program, const InstructionGraph& graph, size_t first, size_t count) {
  const size_t end = std::min(program.instructions.size(), first + count);
  static const char* colors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52"};
  std::string s = "digraph npu_dependencies {\n  rankdir=TB;\n  node [shape=box, fontname=monospace, fontsize=9];\n";
  for (size_t i = first; i < end; ++i) {
    std::string label = disassemble(program.instructions[i].inst);
    std::string escaped;
    for (char c : label) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += c;
    }
    s += fmt::format("  i{} [label=\"#{} L{} h={}\\n{}\", color=\"{}\"];\n", i, i, graph.level[i], graph.height[i], escaped,
                     colors[static_cast<size_t>(graph.unit[i])]);
  }
  for (size_t j = first; j < end; ++j)
    for (const DepEdge* e = graph.predBegin(j); e != graph.predEnd(j); ++e) {
      if (e->other < first) continue;
      std::string kinds;
      for (DepKind k : {DepKind::ReadAfterWrite, DepKind::WriteAfterRead, DepKind::WriteAfterWrite})
        if (e->has(k)) {
          if (!kinds.empty()) kinds += "+";
          kinds += depKindName(k);
        }
      const char* style = e->has(DepKind::ReadAfterWrite) ? "solid" : e->has(DepKind::WriteAfterRead) ? "dashed" : "dotted";
      s += fmt::format("  i{} -> i{} [label=\"{}\", style={}];\n", e->other, j, kinds, style);
    }
  s += "}\n";
  return s;
}

}  // namespace tessel::npu::sched
