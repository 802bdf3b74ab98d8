// Tests of NPU scheduling (S2, S0): the dependency graph and the tokens of a small hand-written program
// against what was worked out by hand, the hazard checker catching one removed RAW, WAR and WAW ordering of a
// real fused schedule, the schedule's JSON form, and fused schedules matching the interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "targets/npu/schedule/instruction_scheduler.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/schedule.h"

#include "npu_test_util.h"

namespace {

using namespace tessel;
using namespace tessel::npu;
using test::randomTensor;

constexpr uint8_t bit(Unit u) { return static_cast<uint8_t>(1u << static_cast<unsigned>(u)); }
constexpr uint8_t kindBit(DepKind k) { return static_cast<uint8_t>(1u << static_cast<unsigned>(k)); }
constexpr uint8_t RAW = kindBit(DepKind::ReadAfterWrite), WAR = kindBit(DepKind::WriteAfterRead),
                  WAW = kindBit(DepKind::WriteAfterWrite);

/// A 16x16 block program on virtual regions (one tile):
///   0 LD  in  <- dram[0]          1 LD  wgt <- dram[256]
///   2 MM  acc  = in x wgt         3 LD  in  <- dram[512]   (the same region again)
///   4 MM  acc += in x wgt         5 VEC out  = relu(acc)     6 ST  dram[1024] <- out
struct BlockProgram {
  sched::VirtualProgram program;
  BlockProgram() {
    sched::ProgramBuilder b;
    b.beginTile(0, 0);
    b.setNode("block");
    const int32_t in = b.region(Buffer::Input, 256), wgt = b.region(Buffer::Weight, 256),
                  acc = b.region(Buffer::Accumulator, 256), out = b.region(Buffer::Output, 256);
    auto load = [&](int32_t r, uint32_t dram) {
      Instruction i;
      i.opcode = Opcode::Load;
      i.dst = b.at(r, 0, 16);
      i.outer = 16;
      i.vecLen = 16;
      i.dramAddr = dram;
      i.dramStrideOuter = 16;
      b.emit(i, {r, -1, -1, -1});
    };
    auto gemm = [&](bool accumulate) {
      Instruction i;
      i.opcode = Opcode::Gemm;
      i.srcA = b.at(in, 0, 16);
      i.srcB = b.at(wgt);
      i.dst = b.at(acc, 0, 16);
      i.outer = 16;
      i.gemmK = i.gemmN = 16;
      i.accumulate = accumulate;
      b.emit(i, {acc, in, wgt, -1});
    };
    load(in, 0);
    load(wgt, 256);
    gemm(false);
    load(in, 512);
    gemm(true);
    Instruction relu;
    relu.opcode = Opcode::VecUnary;
    relu.vecOp = VecOp::Relu;
    relu.dst = b.at(out, 0, 16);
    relu.srcA = b.at(acc, 0, 16);
    relu.outer = 16;
    relu.vecLen = 16;
    b.emit(relu, {out, acc, -1, -1});
    Instruction st;
    st.opcode = Opcode::Store;
    st.srcA = b.at(out, 0, 16);
    st.dramAddr = 1024;
    st.outer = 16;
    st.vecLen = 16;
    st.dramStrideOuter = 16;
    b.emit(st, {-1, out, -1, -1});
    program = b.take();
  }
};

hw::NpuConfig defaultNpu() { return test::shippedConfig("default.json").firstNpu()->npu; }

TEST(NpuSchedule, DependencyGraphOfAHandWrittenProgramIsTheOneWorkedOutByHand) {
  BlockProgram p;
  const sched::InstructionGraph g = sched::buildInstructionGraph(p.program, defaultNpu());
  std::map<std::pair<uint32_t, uint32_t>, uint8_t> edges;
  for (uint32_t c = 0; c < g.size(); ++c)
    for (const sched::DepEdge* e = g.predBegin(c); e != g.predEnd(c); ++e) edges[{e->other, c}] = e->kinds;
  // Worked out from the program: the gemms read what the loads wrote; the second load overwrites the
  // input the first gemm read (WAR) and the first load wrote (WAW); the accumulating gemm reads and
  // rewrites the first gemm's accumulator (RAW + WAW); the weight block is read by both gemms.
  const std::map<std::pair<uint32_t, uint32_t>, uint8_t> want{
      {{0, 2}, RAW}, {{1, 2}, RAW}, {{0, 3}, WAW}, {{2, 3}, WAR},       {{1, 4}, RAW},
      {{2, 4}, RAW | WAW},          {{3, 4}, RAW}, {{4, 5}, RAW}, {{5, 6}, RAW}};
  EXPECT_EQ(edges, want);
  // Parallel levels: a level runs once the levels before it are done (longest edge path from a source).
  EXPECT_EQ(g.level, (std::vector<uint32_t>{0, 0, 1, 2, 3, 4, 5}));
  // Critical-path heights never increase along an edge, and the sources carry the longest.
  for (const auto& [e, kinds] : edges) EXPECT_GT(g.height[e.first], g.height[e.second]) << e.first << "->" << e.second;
  const std::string dot = sched::dependencyGraphDot(p.program, g, 0, g.size());
  EXPECT_NE(dot.find("style=dashed"), std::string::npos) << dot;  // the WAR edge
  EXPECT_NE(dot.find("style=dotted"), std::string::npos) << dot;  // the WAW edge
}

// The word runs the dependency analysis works on cover exactly the words a strided box touches, on both paths of
// their construction (rows whose elements overlap or touch, strideInner <= vec, and rows of separate elements):
// random boxes with strides 0, below, at and above the vector length, against the box's words listed one by one.
TEST(NpuSchedule, WordRunsCoverExactlyTheWordsOfStridedBoxes) {
  uint64_t state = 12345;
  auto below = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  int boxes = 0, rowRuns = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Instruction in;
    in.opcode = Opcode::Load;
    in.outer = 1 + static_cast<uint32_t>(below(6)), in.inner = 1 + static_cast<uint32_t>(below(6)), in.vecLen = 1 + static_cast<uint32_t>(below(20));
    in.dst.buffer = Buffer::Input;
    in.dst.addr = static_cast<uint32_t>(below(64));
    const uint32_t v = in.vecLen;
    const uint32_t strideChoices[] = {0, 1, v > 1 ? v - 1 : 1, v, v + 1, 2 * v + 3, static_cast<uint32_t>(below(80))};
    in.dst.strideInner = strideChoices[below(7)];
    in.dst.strideOuter = strideChoices[below(7)] * (1 + static_cast<uint32_t>(below(3)));
    std::vector<WordRun> runs;
    instructionRuns(in, runs, false);
    std::set<uint64_t> want, got;
    for (uint32_t o = 0; o < in.outer; ++o)
      for (uint32_t i = 0; i < in.inner; ++i)
        for (uint32_t c = 0; c < v; ++c) want.insert(in.dst.addr + uint64_t{o} * in.dst.strideOuter + uint64_t{i} * in.dst.strideInner + c);
    for (const WordRun& r : runs) {
      EXPECT_EQ(r.space, static_cast<uint32_t>(Buffer::Input));
      EXPECT_EQ(r.kind, AccessKind::WriteAtFinish);
      for (uint64_t w = r.first; w < r.first + r.count; ++w) got.insert(w);
    }
    ASSERT_EQ(got, want) << "outer " << in.outer << " inner " << in.inner << " vec " << v << " strides "
                         << in.dst.strideOuter << "," << in.dst.strideInner;
    ++boxes;
    rowRuns += in.inner > 1 && in.dst.strideInner <= v && in.dst.strideInner != v;
  }
  EXPECT_EQ(boxes, 3000);
  EXPECT_GT(rowRuns, 300);  // the overlapping-row path was exercised
}

TEST(NpuSchedule, TokensOfAHandWrittenProgramAreTheOnesWorkedOutByHand) {
  BlockProgram p;
  const hw::NpuConfig cfg = defaultNpu();
  const sched::InstructionGraph g = sched::buildInstructionGraph(p.program, cfg);
  const sched::ScheduleResult r = sched::listSchedule(p.program, g, cfg, {});
  // Every instruction depends on the one before it or its unit's previous one: program order is the only order.
  EXPECT_EQ(r.order, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6}));
  const Program prog = sched::materialize(p.program, r);
  // One token per cross-unit edge not implied by another: the gemm waits for the weight load only (the
  // input load is earlier on the same unit); the reload waits for the first gemm (WAR); the accumulating
  // gemm's wait on the weight load is implied by the first gemm's.
  const Unit LD = Unit::Load, MM = Unit::Matrix, VEC = Unit::Vector, ST = Unit::Store;
  const std::vector<std::pair<uint8_t, uint8_t>> want{
      {0, 0}, {0, bit(MM)}, {bit(LD), bit(LD)}, {bit(MM), bit(MM)}, {bit(LD), bit(VEC)}, {bit(MM), bit(ST)}, {bit(VEC), 0}};
  ASSERT_EQ(prog.instructions.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(prog.instructions[i].waitMask, want[i].first) << i << ": " << disassemble(prog.instructions[i]);
    EXPECT_EQ(prog.instructions[i].signalMask, want[i].second) << i << ": " << disassemble(prog.instructions[i]);
  }
  // One region per buffer, in one tile: each at its buffer's base; both loads of the input at the same words.
  std::string text = disassemble(prog);
  for (const char* line : {"LD   load    inp[0; 16,0]", "MM   gemm    acc[0; 16,0] = inp[0; 16,0] x wgt[0]",
                           "MM   gemm    acc[0; 16,0] += inp[0; 16,0] x wgt[0]", "VEC  vun     relu       out[0; 16,0] <- acc[0; 16,0]"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  // The program runs without hazards.
  SimOptions o;
  o.checkHazards = true;
  Dram dram(2048);
  SimReport rep = simulate(prog, cfg, dram, o);
  EXPECT_TRUE(rep.hazards.empty()) << rep.hazards.front().describe();
  EXPECT_EQ(rep.totalCycles, r.cycles);
}

/// conv -> relu -> conv -> add(residual): the chain the compiler fuses into row tiles.
void residualBlock(Graph& g) {
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 24, 24}));
  auto conv = [&](Value* in, uint32_t seed) {
    Node* n = g.addNode("Conv", {in, g.addConstant(g.uniqueName("w"), randomTensor({16, 16, 3, 3}, seed))}, {g.uniqueName("c")});
    n->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    n->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
    return n->output(0);
  };
  Value* y = g.addNode("Relu", {conv(x, 1)}, {"r"})->output(0);
  g.addOutput(g.addNode("Add", {conv(y, 2), x}, {"a"})->output(0));
  inferShapes(g);
}

/// The program's cross-unit dependencies (the shared analysis, SRAM only) as (producer, consumer) -> kinds.
std::map<std::pair<size_t, size_t>, uint8_t> crossUnitDependencies(const Program& p) {
  std::map<std::pair<size_t, size_t>, uint8_t> deps;
  DependencyTracker tracker;
  std::vector<WordRun> runs;
  for (size_t j = 0; j < p.instructions.size(); ++j) {
    runs.clear();
    instructionRuns(p.instructions[j], runs, false);
    tracker.visit(static_cast<uint32_t>(j), p.instructions[j].unit(), runs, [&](const Dependency& d) {
      if (p.instructions[d.producer].unit() != p.instructions[j].unit()) deps[{d.producer, j}] |= kindBit(d.kind);
    });
  }
  return deps;
}

/// Removes instruction j's wait on unit `from` and the signal that token would have come from (the n-th
/// token `from` sends to j's unit is the one j's unit's n-th wait on `from` pops), keeping the program
/// free of deadlock.
void removeToken(Program& p, size_t j, Unit from) {
  const Unit to = p.instructions[j].unit();
  size_t n = 0;
  for (size_t i = 0; i < j; ++i)
    if (p.instructions[i].unit() == to && (p.instructions[i].waitMask & bit(from))) ++n;
  for (Instruction& i : p.instructions)
    if (i.unit() == from && (i.signalMask & bit(to)) && n-- == 0) {
      i.signalMask &= static_cast<uint8_t>(~bit(to));
      break;
    }
  p.instructions[j].waitMask &= static_cast<uint8_t>(~bit(from));
}

TEST(NpuSchedule, HazardCheckerCatchesEachRemovedRawWarAndWawOrdering) {
  Graph g;
  residualBlock(g);
  hw::HardwareConfig cfg = test::shippedConfig("tiny.json");
  const hw::Device& dev = *cfg.firstNpu();
  NpuSchedule s = compilerSchedule(g, dev.npu, "block");
  const LoweredSubgraph lowered = lowerSubgraph(g, dev, s);
  const std::vector<Tensor> inputs{randomTensor({1, 16, 24, 24}, 3)};
  ASSERT_TRUE(runLowered(lowered, dev.npu, inputs).report.hazards.empty());
  const auto deps = crossUnitDependencies(lowered.program);
  // For each kind, the first dependency of that kind whose consumer waits for a token from the producer's
  // unit: removing that token (and its signal) leaves it unordered, which the checker must report.
  for (DepKind kind : {DepKind::ReadAfterWrite, DepKind::WriteAfterRead, DepKind::WriteAfterWrite}) {
    bool tried = false;
    for (const auto& [e, kinds] : deps) {
      const auto [p, j] = e;
      const Unit from = lowered.program.instructions[p].unit();
      if (!(kinds & kindBit(kind)) || !(lowered.program.instructions[j].waitMask & bit(from))) continue;
      // The token must be the one that orders p before j: no other dependency of j on `from` is later than p.
      bool latest = true;
      for (const auto& [e2, k2] : deps)
        if (e2.second == j && e2.first > p && lowered.program.instructions[e2.first].unit() == from) latest = false;
      if (!latest) continue;
      LoweredSubgraph broken = lowered;
      removeToken(broken.program, j, from);
      const SimReport rep = runLowered(broken, dev.npu, inputs).report;
      bool caught = false;
      for (const Hazard& h : rep.hazards)
        caught |= h.earlier == p && h.later == j && static_cast<DepKind>(h.kind) == kind && h.unsynchronised;
      EXPECT_TRUE(caught) << depKindName(kind) << " #" << p << " -> #" << j << " removed, hazards: " << rep.hazards.size();
      tried = true;
      break;
    }
    EXPECT_TRUE(tried) << "no " << depKindName(kind) << " dependency carried by its own token in the schedule";
  }
}

TEST(NpuSchedule, JsonRoundTripsAndVerificationNamesTheField) {
  Graph g;
  residualBlock(g);
  const hw::NpuConfig cfg = defaultNpu();
  NpuSchedule s = compilerSchedule(g, cfg, "block");
  const NpuSchedule back = NpuSchedule::fromJson(s.toJson(), "test");
  EXPECT_EQ(back, s);
  verifySchedule(back, g, cfg);
  nlohmann::json bad = s.toJson();
  bad["strategy"] = "fastest";
  try {
    NpuSchedule::fromJson(bad, "test");
    FAIL() << "an unknown strategy was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("strategy"), std::string::npos) << e.what();
  }
}

TEST(NpuSchedule, FusedWindowAndGreedySchedulesMatchTheInterpreter) {
  Graph g;
  residualBlock(g);
  const std::map<std::string, Tensor> named{{"x", randomTensor({1, 16, 24, 24}, 3)}};
  const Tensor want = Interpreter(g).run(named).at(0);
  for (const char* cfgName : {"default.json", "tiny.json", "edge.json"})
    for (const char* strategy : {"window", "greedy", "sequential"}) {
      hw::HardwareConfig cfg = test::shippedConfig(cfgName);
      const hw::Device& dev = *cfg.firstNpu();
      NpuSchedule s = compilerSchedule(g, dev.npu, "block");
      s.strategy = strategy;
      const NpuRun run = runLowered(lowerSubgraph(g, dev, s), dev.npu, {named.at("x")});
      EXPECT_TRUE(run.report.hazards.empty()) << cfgName << " " << strategy << ": " << run.report.hazards.front().describe();
      const float *a = run.outputs.at(0).data<float>(), *b = want.data<float>();
      float diff = 0;
      for (int64_t i = 0; i < want.numel(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
      EXPECT_LE(diff, 1e-4f) << cfgName << " " << strategy;
    }
}

// A fan-out the fusion may join (p feeding two 1x1 convs) where one branch's result is read by a grouped conv
// that runs between the branches (RegNet's blocks): the fused group would take the last branch's place, after
// its reader, so the candidate is dropped and the schedule verifies; the lowering matches the interpreter.
// chooseFusion's rule: a fused option no slower than its members layer by layer is taken; a slower one only within
// 3 % and when it saves a fifth of the context's traffic, or a tenth and at least what the load unit moves in the
// extra cycles (32 bytes per cycle on `default`). The figures are ResNet-18's layer1.0 on `edge` as priced in context.
TEST(NpuSchedule, FusionPaysOffWhenItsSavedTrafficOutweighsItsExtraCycles) {
  const hw::NpuConfig cfg = defaultNpu();
  ASSERT_EQ(cfg.loadBytesPerCycle, 32u);
  const PricedOption layered{1'603'646, 10'514'688};
  const uint64_t traffic = 10'071'552;
  EXPECT_TRUE(fusionPaysOff(layered, {1'633'366, 8'964'352}, traffic, cfg));  // 1.55 MB saved for 29,720 cycles (0.95 MB)
  EXPECT_TRUE(fusionPaysOff(layered, {1'603'646, 10'600'000}, traffic, cfg));  // not slower: taken whatever it moves
  EXPECT_FALSE(fusionPaysOff(layered, {1'633'366, 9'700'000}, traffic, cfg));  // 0.81 MB saved: less than 0.95 MB
  EXPECT_TRUE(fusionPaysOff(layered, {1'643'646, 9'234'688}, traffic, cfg));   // exactly 40,000 x 32 bytes saved
  EXPECT_FALSE(fusionPaysOff(layered, {1'643'646, 9'234'689}, traffic, cfg));  // one byte fewer
  EXPECT_FALSE(fusionPaysOff(layered, {1'651'756, 0}, traffic, cfg));          // all traffic saved, but 3.0 % slower
  EXPECT_TRUE(fusionPaysOff(layered, {1'651'755, 8'500'000}, traffic, cfg));   // a fifth of the traffic, 2.99 % slower
  EXPECT_TRUE(fusionPaysOff(layered, {1'651'755, 8'600'000}, traffic, cfg));   // 1.91 MB: below the fifth, above 48,109 x 32
  EXPECT_FALSE(fusionPaysOff(layered, {1'651'755, 9'014'688}, traffic, cfg));  // 1.50 MB: below both
  // A tenth of the traffic at least: 1,007,156 bytes here, more than the 0.19 MB of load time of 6,000 cycles.
  EXPECT_TRUE(fusionPaysOff(layered, {1'609'646, 9'507'532}, traffic, cfg));
  EXPECT_FALSE(fusionPaysOff(layered, {1'609'646, 9'507'533}, traffic, cfg));
}

TEST(NpuSchedule, FusionCandidatesNeverPlaceAValueAfterItsReader) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 12, 12}));
  auto conv = [&](Value* in, int64_t k, int64_t group, uint32_t seed) {
    Node* n = g.addNode("Conv", {in, g.addConstant(g.uniqueName("w"), randomTensor({16, 16 / group, k, k}, seed))}, {g.uniqueName("c")});
    n->setAttr("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
    n->setAttr("kernel_shape", std::vector<int64_t>{k, k});
    n->setAttr("group", group);
    return n->output(0);
  };
  Value* p = conv(x, 3, 1, 1);
  Value* a = g.addNode("Relu", {conv(p, 1, 1, 2)}, {"a"})->output(0);
  Value* b = conv(p, 1, 1, 3);
  Value* grouped = conv(a, 3, 2, 4);
  g.addOutput(g.addNode("Add", {b, grouped}, {"y"})->output(0));
  inferShapes(g);
  for (const char* cfgName : {"default.json", "edge.json"}) {
    hw::HardwareConfig cfg = test::shippedConfig(cfgName);
    const hw::Device& dev = *cfg.firstNpu();
    const NpuSchedule layered = compilerSchedule(g, dev.npu, "fanout", false);
    std::map<std::string, size_t> groupOf;
    for (size_t k = 0; k < layered.groups.size(); ++k)
      for (const std::string& n : layered.groups[k].nodes) groupOf[n] = k;
    for (const std::vector<size_t>& members : fusionCandidates(layered, g, dev.npu))
      for (size_t m : members)
        for (const std::string& name : layered.groups[m].nodes)
          for (const auto& node : g.nodes())
            if (node->name() == name)
              for (const Use& u : node->output(0)->uses()) {
                const size_t reader = groupOf.at(u.node->name());
                EXPECT_TRUE(std::count(members.begin(), members.end(), reader) || reader > members.back())
                    << cfgName << ": candidate ending at group " << members.back() << " holds " << name << ", read by group " << reader;
              }
    const NpuSchedule s = compilerSchedule(g, dev.npu, "fanout");
    verifySchedule(s, g, dev.npu);
    const std::map<std::string, Tensor> named{{"x", randomTensor({1, 16, 12, 12}, 9)}};
    const Tensor want = Interpreter(g).run(named).at(0);
    const NpuRun run = runLowered(lowerSubgraph(g, dev, s), dev.npu, {named.at("x")});
    float scale = 0;
    const float diff = test::maxAbsDiff(run.outputs.at(0), want, &scale);
    EXPECT_LE(diff, 1e-4f * scale) << cfgName;
  }
}


// A stem (3 input channels, 7x7 stride 2) -> ReLU -> max pool fused into row tiles on `edge`: the conv loads its
// input from DRAM with the stacked reduction layout (each output row's kernel rows side by side, the fastest on
// few channels), the pool reads the conv's rows on chip. Every layout the search may pick lowers, keeps the
// stem stacked, and matches the interpreter; a fused stem switched to "packed" still matches (the other layout).
TEST(NpuSchedule, FusedStemKeepsItsStackedLayoutAndMatchesTheInterpreter) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 3, 37, 41}));
  Node* stem = g.addNode("Conv", {x, g.addConstant("w", randomTensor({24, 3, 7, 7}, 5))}, {"c"});
  stem->setAttr("pads", std::vector<int64_t>{3, 3, 3, 3});
  stem->setAttr("kernel_shape", std::vector<int64_t>{7, 7});
  stem->setAttr("strides", std::vector<int64_t>{2, 2});
  Value* r = g.addNode("Relu", {stem->output(0)}, {"r"})->output(0);
  Node* pool = g.addNode("MaxPool", {r}, {"y"});
  pool->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
  pool->setAttr("strides", std::vector<int64_t>{2, 2});
  pool->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.addOutput(pool->output(0));
  inferShapes(g);
  hw::HardwareConfig cfg = test::shippedConfig("edge.json");
  const hw::Device& dev = *cfg.firstNpu();
  NpuSchedule layered = compilerSchedule(g, dev.npu, "stem", false);
  ASSERT_EQ(layered.groups.size(), 2u);
  layered.groups[0].tiling[0].variant = "stacked";
  verifySchedule(layered, g, dev.npu);
  const std::vector<std::vector<size_t>> candidates = fusionCandidates(layered, g, dev.npu);
  ASSERT_EQ(candidates.size(), 1u);
  const std::map<std::string, Tensor> named{{"x", randomTensor({1, 3, 37, 41}, 6)}};
  const Tensor want = Interpreter(g).run(named).at(0);
  const std::vector<FusionLayout> layouts = fusionLayouts(layered, candidates[0], g, dev.npu);
  ASSERT_FALSE(layouts.empty());
  for (const FusionLayout& layout : layouts)
    for (const char* variant : {"stacked", "packed"}) {
      NpuSchedule s = layered;
      GroupSchedule f = fuseGroup(layered, candidates[0], g, dev.npu, layout);
      EXPECT_EQ(f.tiling[0].variant, "stacked") << layout.rowTiles << (layout.onChip ? " on chip" : " through DRAM");
      f.tiling[0].variant = variant;
      replaceByFusedGroups(s, {{candidates[0], f}});
      ASSERT_EQ(s.groups.size(), 1u);
      verifySchedule(s, g, dev.npu);
      const NpuRun run = runLowered(lowerSubgraph(g, dev, s), dev.npu, {named.at("x")});
      EXPECT_TRUE(run.report.hazards.empty()) << run.report.hazards.front().describe();
      float scale = 0;
      const float diff = test::maxAbsDiff(run.outputs.at(0), want, &scale);
      EXPECT_LE(diff, 1e-4f * scale) << variant << " " << layout.rowTiles << (layout.onChip ? " on chip" : " through DRAM");
    }
}

// A fused residual block (conv -> relu -> conv -> add -> relu) followed by a classifier's global average pool: the
// pool is reduced from the fused group's last output tiles (its map is never stored), for every fusion layout
// the search may pick, and matches the interpreter. A max pool of the same map too.
TEST(NpuSchedule, FusedGroupReducesTheGlobalPoolFromItsLastTilesAndMatchesTheInterpreter) {
  for (const char* poolOp : {"GlobalAveragePool", "GlobalMaxPool"}) {
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, 19, 13}));
    auto conv = [&](Value* in, const std::string& name, uint64_t seed) {
      Node* c = g.addNode("Conv", {in, g.addConstant(name + "_w", randomTensor({24, 24, 3, 3}, seed)),
                                   g.addConstant(name + "_b", randomTensor({24}, seed + 1))},
                          {name});
      c->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
      c->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
      return c->output(0);
    };
    Value* r1 = g.addNode("Relu", {conv(x, "c1", 11)}, {"r1"})->output(0);
    Value* sum = g.addNode("Add", {conv(r1, "c2", 13), x}, {"s"})->output(0);
    Value* r2 = g.addNode("Relu", {sum}, {"r2"})->output(0);
    g.addOutput(g.addNode(poolOp, {r2}, {"y"})->output(0));
    inferShapes(g);
    hw::HardwareConfig cfg = test::shippedConfig("edge.json");
    const hw::Device& dev = *cfg.firstNpu();
    const NpuSchedule layered = tiledSchedule(g, dev.npu, "block");
    const std::vector<std::vector<size_t>> candidates = fusionCandidates(layered, g, dev.npu);
    ASSERT_EQ(candidates.size(), 1u) << poolOp;
    const std::map<std::string, Tensor> named{{"x", randomTensor({1, 24, 19, 13}, 12)}};
    const Tensor want = Interpreter(g).run(named).at(0);
    const std::vector<FusionLayout> layouts = fusionLayouts(layered, candidates[0], g, dev.npu);
    ASSERT_FALSE(layouts.empty());
    for (const FusionLayout& layout : layouts) {
      NpuSchedule s = layered;
      replaceByFusedGroups(s, {{candidates[0], fuseGroup(layered, candidates[0], g, dev.npu, layout)}});
      ASSERT_EQ(s.groups.size(), 2u);
      ASSERT_TRUE(foldGlobalPool(s, g, "y", "c2")) << poolOp << " " << layout.rowTiles;
      ASSERT_EQ(s.groups.size(), 1u);
      EXPECT_EQ(s.groups[0].tiling.back().globalPool, "y");
      verifySchedule(s, g, dev.npu);
      const LoweredSubgraph lowered = lowerSubgraph(g, dev, s);
      const NpuRun run = runLowered(lowered, dev.npu, {named.at("x")});
      EXPECT_TRUE(run.report.hazards.empty()) << run.report.hazards.front().describe();
      float scale = 0;
      const float diff = test::maxAbsDiff(run.outputs.at(0), want, &scale);
      EXPECT_LE(diff, 1e-4f * scale) << poolOp << " " << layout.rowTiles << (layout.onChip ? " on chip" : " through DRAM");
    }
    // The pool is not the fused group's to take from a stage other than its last.
    NpuSchedule wrong = layered;
    replaceByFusedGroups(wrong, {{candidates[0], fuseGroup(layered, candidates[0], g, dev.npu, layouts[0])}});
    wrong.groups[0].tiling.front().globalPool = "y";
    wrong.groups[0].nodes.push_back("y");
    wrong.groups.pop_back();
    EXPECT_THROW(verifySchedule(wrong, g, dev.npu), UserError) << poolOp;
  }
}

}  // namespace
