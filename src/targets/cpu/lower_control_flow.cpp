// Control flow in generated code: an If becomes a C++ if/else around its branches' steps, a Loop and a Scan
// a C++ for loop around their body's steps (loop-carried values copied back at the end of each iteration,
// scan outputs written slice by slice, a Loop's condition checked before each iteration). The bodies are
// lowered node by node like the main graph (captured outer values are the outer tensors); only nested
// graphs whose values all have static shapes are compiled, else the node goes to the host fallback.
#include <algorithm>
#include <fmt/format.h>

#include "lowerer.h"
#include "tessel/support/error.h"

namespace tessel::cpu {
namespace {

/// Every node of g (and of the graphs nested in it) reads and writes tensors of static shape and of an
/// element type compiled code stores, and so do g's inputs and outputs.
bool staticGraph(const Graph& g) {
  auto storable = [](const Value* v) {
    const Value* d = definitionOf(v);
    return isConst(d) || (compiledDType(d->type.dtype) && d->type.isStatic());
  };
  for (const Value* v : g.inputs())
    if (!storable(v)) return false;
  for (const Value* v : g.outputs())
    if (!storable(v)) return false;
  for (const auto& node : g.nodes()) {
    if (isOp(*node, "Constant")) continue;
    if (!staticTensorsOnly(node.get())) return false;
    for (const Graph* sub : node->subgraphs())
      if (!staticGraph(*sub)) return false;
  }
  return true;
}

int64_t bytesOf(const PlanTensor& t) { return t.numel * static_cast<int64_t>(dtypeSize(t.dtype)); }

/// outer, length and inner byte count of a shape cut at `axis` (the slice of one position along it).
struct AxisCut {
  int64_t outer = 1, length = 1, innerBytes = 1;
};
AxisCut cutAt(const PlanTensor& t, size_t axis) {
  AxisCut c;
  c.innerBytes = static_cast<int64_t>(dtypeSize(t.dtype));
  for (size_t a = 0; a < t.shape.size(); ++a) {
    if (a < axis) c.outer *= t.shape[a];
    else if (a == axis) c.length = t.shape[a];
    else c.innerBytes *= t.shape[a];
  }
  return c;
}

}  // namespace

bool Lowerer::lowerControlFlow(const Node* n) {
  if (!n->domain().empty()) return false;
  for (const Graph* sub : n->subgraphs())
    if (!staticGraph(*sub)) return false;
  if (isOp(*n, "If")) return lowerIf(n);
  if (isOp(*n, "Loop")) return lowerLoop(n);
  if (isOp(*n, "Scan")) return lowerScan(n);
  return false;
}

void Lowerer::copyStep(const Node* n, int from, int to, const std::string& what) {
  if (rootOf(plan_, from) == rootOf(plan_, to) && offsetInRoot(plan_, from) == offsetInRoot(plan_, to)) return;
  addStep({n->name(), n->opType() + " " + what, "memmove"}, fmt::format("{} '{}': {}", n->opType(), n->name(), what),
          fmt::format("std::memmove({}, {}, {});", ref(to), ref(from), bytesOf(plan_.tensors[to])), {from}, {to});
}

size_t Lowerer::lowerBody(const Graph& body) {
  size_t first = plan_.steps.size();
  lowerNodes(body);
  return first;
}

void Lowerer::keepLiveThrough(size_t open, size_t close) {
  std::set<int> written, read;
  for (size_t i = open; i < close; ++i) {
    written.insert(plan_.steps[i].writes.begin(), plan_.steps[i].writes.end());
    read.insert(plan_.steps[i].reads.begin(), plan_.steps[i].reads.end());
  }
  PlanStep& end = plan_.steps[close];
  for (int id : read)
    if (!written.count(id)) end.reads.push_back(id);
  // What the closing step writes (carried values, scan output slices) must keep its storage through the
  // whole loop: the opening step counts as its first write.
  for (int id : end.writes) plan_.steps[open].writes.push_back(id);
}

std::string Lowerer::carryBack(const Node* n, const std::vector<int>& next, const std::vector<int>& state,
                                std::vector<int>& reads, std::vector<int>& writes) {
  auto same = [&](int a, int b) {
    return rootOf(plan_, a) == rootOf(plan_, b) && offsetInRoot(plan_, a) == offsetInRoot(plan_, b);
  };
  // A value that shares storage with another one's input (a swap) goes through a temporary.
  bool swap = false;
  for (size_t i = 0; i < next.size(); ++i)
    for (size_t j = 0; j < state.size(); ++j) swap = swap || (i != j && rootOf(plan_, next[i]) == rootOf(plan_, state[j]));
  std::string code;
  for (size_t i = 0; i < next.size(); ++i) {
    if (same(next[i], state[i])) continue;  // the body passes its input through
    int from = next[i];
    if (swap) {
      PlanTensor t = plan_.tensors[state[i]];
      t.name += ".next";
      t.aliasOf = -1;
      t.aliasOffset = 0;
      plan_.tensors.push_back(t);
      from = static_cast<int>(plan_.tensors.size()) - 1;
      copyStep(n, next[i], from, fmt::format("carried value {} (through a temporary)", i));
    }
    code += fmt::format("\n  std::memmove({}, {}, {});", ref(state[i]), ref(from), bytesOf(plan_.tensors[state[i]]));
    reads.push_back(from);
    writes.push_back(state[i]);
  }
  return code;
}

bool Lowerer::lowerIf(const Node* n) {
  const Graph& thenG = n->attrGraph("then_branch");
  const Graph& elseG = n->attrGraph("else_branch");
  if (thenG.outputs().size() != n->numOutputs() || elseG.outputs().size() != n->numOutputs()) return false;
  for (const Graph* g : {&thenG, &elseG})
    for (size_t i = 0; i < n->numOutputs(); ++i)
      if (n->output(i) && !(definitionOf(g->outputs()[i])->type == n->output(i)->type)) return false;
  const int cond = tensorOf(n->input(0));
  std::vector<int> outs;
  for (const Value* o : n->outputs()) outs.push_back(o ? tensorOf(o) : -1);
  auto branch = [&](const Graph& g, const char* name) {
    lowerBody(g);
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i] >= 0) copyStep(n, tensorOf(g.outputs()[i]), outs[i], fmt::format("{} output {}", name, i));
  };
  addStep({n->name(), "If", "if"}, fmt::format("If '{}'", n->name()), fmt::format("if (*{} != 0) {{", ref(cond)),
          {cond}, {});
  branch(thenG, "then_branch");
  addStep({n->name(), "If else", "else"}, fmt::format("If '{}': else_branch", n->name()), "} else {", {}, {});
  branch(elseG, "else_branch");
  addStep({n->name(), "If end", "end"}, fmt::format("If '{}' ends", n->name()), "}", {}, {});
  return true;
}

bool Lowerer::lowerLoop(const Node* n) {
  const Graph& body = n->attrGraph("body");
  const size_t carried = n->numInputs() < 2 ? 0 : n->numInputs() - 2;
  if (body.inputs().size() != carried + 2 || body.outputs().size() < carried + 1) return false;
  const size_t scans = body.outputs().size() - 1 - carried;
  if (n->numOutputs() > carried + scans) return false;
  for (size_t s = 0; s < scans && carried + s < n->numOutputs(); ++s) {  // slices of a static trip count
    const Value* out = n->output(carried + s);
    const TensorType& part = definitionOf(body.outputs()[1 + carried + s])->type;
    if (out && (out->type.rank() == 0 || out->type.staticSize() != (*out->type.dims)[0].value * part.staticSize()))
      return false;
  }
  const int k = controlCounter_++;
  const std::string trips = fmt::format("trips{}", k), cond = fmt::format("cond{}", k), it = fmt::format("it{}", k);
  // Before the loop: the trip count, the condition and the carried values' first values.
  std::vector<int> reads;
  std::string code = fmt::format("int64_t {} = INT64_MAX;\n  bool {} = true;", trips, cond);
  if (n->input(0)) {
    reads.push_back(tensorOf(n->input(0)));
    code += fmt::format("\n  {} = static_cast<int64_t>(*{});", trips, ref(reads.back()));
  }
  if (n->input(1)) {
    reads.push_back(tensorOf(n->input(1)));
    code += fmt::format("\n  {} = *{} != 0;", cond, ref(reads.back()));
  }
  addStep({n->name(), "Loop", "for"}, fmt::format("Loop '{}': trip count and condition", n->name()), code, reads, {});
  std::vector<int> state;
  for (size_t i = 0; i < carried; ++i) {
    state.push_back(tensorOf(body.inputs()[2 + i]));
    copyStep(n, tensorOf(n->input(2 + i)), state.back(), fmt::format("initial value of carried value {}", i));
  }
  const int iterIn = tensorOf(body.inputs()[0]), condIn = tensorOf(body.inputs()[1]);
  addStep({n->name(), "Loop", "for"}, fmt::format("Loop '{}': each iteration", n->name()),
          fmt::format("for (int64_t {0} = 0; {0} < {1} && {2}; ++{0}) {{\n  *{3} = {0};\n  *{4} = {2};", it, trips,
                      cond, ref(iterIn), ref(condIn)),
          {}, {iterIn, condIn});
  const size_t first = lowerBody(body);
  // End of an iteration: the condition, carried values back into the body's inputs, scan output slices.
  const int condOut = tensorOf(body.outputs()[0]);
  std::vector<int> closeReads{condOut}, closeWrites;
  std::string close = fmt::format("{} = *{} != 0;", cond, ref(condOut));
  std::vector<int> next;
  for (size_t i = 0; i < carried; ++i) next.push_back(tensorOf(body.outputs()[1 + i]));
  // Scan output slices first: a scan output may be a carried input, which the copies below overwrite.
  for (size_t s = 0; s < scans; ++s) {
    const Value* out = carried + s < n->numOutputs() ? n->output(carried + s) : nullptr;
    if (!out) continue;
    const int y = tensorOf(out), part = tensorOf(body.outputs()[1 + carried + s]);
    const int64_t bytes = bytesOf(plan_.tensors[part]);
    // The output's first dimension is the static trip count (no condition input), so it never overflows.
    close += fmt::format("\n  if ({} < {}) std::memcpy(reinterpret_cast<char*>({}) + {} * {}, {}, {});", it,
                         plan_.tensors[y].shape[0], ref(y), it, bytes, ref(part), bytes);
    closeReads.push_back(part);
    closeWrites.push_back(y);
  }
  close += carryBack(n, next, state, closeReads, closeWrites);
  addStep({n->name(), "Loop", "for"}, fmt::format("Loop '{}': next iteration", n->name()), close + "\n  }",
          closeReads, closeWrites);
  keepLiveThrough(first - 1, plan_.steps.size() - 1);
  for (size_t i = 0; i < carried && i < n->numOutputs(); ++i)
    if (n->output(i)) copyStep(n, state[i], tensorOf(n->output(i)), fmt::format("final value of carried value {}", i));
  return true;
}

bool Lowerer::lowerScan(const Node* n) {
  const Graph& body = n->attrGraph("body");
  if (n->numInputs() != body.inputs().size()) return false;  // opset 8's batched form (sequence_lens first)
  const size_t numScanIn = static_cast<size_t>(n->attrInt("num_scan_inputs"));
  if (numScanIn == 0 || numScanIn > n->numInputs()) return false;
  const size_t numState = n->numInputs() - numScanIn;
  if (body.outputs().size() < numState || n->numOutputs() > body.outputs().size()) return false;
  const size_t numScanOut = body.outputs().size() - numState;
  auto ints = [&](const char* name, size_t count) {
    return n->hasAttr(name) ? n->attrInts(name) : std::vector<int64_t>(count, 0);
  };
  std::vector<int64_t> inAxes = ints("scan_input_axes", numScanIn), inDirs = ints("scan_input_directions", numScanIn);
  std::vector<int64_t> outAxes = ints("scan_output_axes", numScanOut), outDirs = ints("scan_output_directions", numScanOut);
  if (inAxes.size() != numScanIn || inDirs.size() != numScanIn || outAxes.size() != numScanOut ||
      outDirs.size() != numScanOut)
    return false;
  std::vector<int> scanIn;
  int64_t length = -1;
  for (size_t j = 0; j < numScanIn; ++j) {
    scanIn.push_back(tensorOf(n->input(numState + j)));
    const int64_t rank = static_cast<int64_t>(plan_.tensors[scanIn[j]].shape.size());
    if (inAxes[j] < 0) inAxes[j] += rank;
    if (inAxes[j] < 0 || inAxes[j] >= rank) return false;
    const int64_t len = plan_.tensors[scanIn[j]].shape[static_cast<size_t>(inAxes[j])];
    if (length >= 0 && len != length) return false;
    length = len;
  }
  std::vector<int> scanOut(numScanOut, -1);
  for (size_t s = 0; s < numScanOut; ++s) {
    if (numState + s >= n->numOutputs() || !n->output(numState + s)) continue;
    scanOut[s] = tensorOf(n->output(numState + s));
    const int64_t rank = static_cast<int64_t>(plan_.tensors[scanOut[s]].shape.size());
    if (outAxes[s] < 0) outAxes[s] += rank;
    if (outAxes[s] < 0 || outAxes[s] >= rank ||
        plan_.tensors[scanOut[s]].shape[static_cast<size_t>(outAxes[s])] != length)
      return false;
  }
  const int k = controlCounter_++;
  const std::string t = fmt::format("t{}", k);
  std::vector<int> state;
  for (size_t i = 0; i < numState; ++i) {
    state.push_back(tensorOf(body.inputs()[i]));
    copyStep(n, tensorOf(n->input(i)), state.back(), fmt::format("initial value of state {}", i));
  }
  std::string open = fmt::format("for (int64_t {0} = 0; {0} < {1}; ++{0}) {{", t, length);
  std::vector<int> openWrites;
  for (size_t j = 0; j < numScanIn; ++j) {
    const int part = tensorOf(body.inputs()[numState + j]);
    const AxisCut c = cutAt(plan_.tensors[scanIn[j]], static_cast<size_t>(inAxes[j]));
    open += fmt::format("\n  axis_slice({}, {}, {}, {}, {}, {}, true);", ref(scanIn[j]), ref(part), c.outer, c.length,
                        c.innerBytes, inDirs[j] ? fmt::format("{} - 1 - {}", length, t) : t);
    openWrites.push_back(part);
  }
  addStep({n->name(), "Scan", "for"}, fmt::format("Scan '{}': each of {} positions", n->name(), length), open, scanIn,
          openWrites);
  const size_t first = lowerBody(body);
  std::string close;
  std::vector<int> closeReads, closeWrites;
  for (size_t s = 0; s < numScanOut; ++s) {
    if (scanOut[s] < 0) continue;
    const int part = tensorOf(body.outputs()[numState + s]);
    const AxisCut c = cutAt(plan_.tensors[scanOut[s]], static_cast<size_t>(outAxes[s]));
    close += fmt::format("axis_slice({}, {}, {}, {}, {}, {}, false);\n  ", ref(part), ref(scanOut[s]), c.outer,
                         c.length, c.innerBytes, outDirs[s] ? fmt::format("{} - 1 - {}", length, t) : t);
    closeReads.push_back(part);
    closeWrites.push_back(scanOut[s]);
  }
  std::vector<int> next;
  for (size_t i = 0; i < numState; ++i) next.push_back(tensorOf(body.outputs()[i]));
  close += carryBack(n, next, state, closeReads, closeWrites);
  addStep({n->name(), "Scan", "for"}, fmt::format("Scan '{}': next position", n->name()), close + "\n  }", closeReads,
          closeWrites);
  keepLiveThrough(first - 1, plan_.steps.size() - 1);
  for (size_t i = 0; i < numState && i < n->numOutputs(); ++i)
    if (n->output(i)) copyStep(n, state[i], tensorOf(n->output(i)), fmt::format("final value of state {}", i));
  return true;
}

}  // namespace tessel::cpu
