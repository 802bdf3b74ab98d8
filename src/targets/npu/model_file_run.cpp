// Compiling a model into a CompiledNpuModel (partition + lowering, NPU subgraphs become tessel.NpuCall
// nodes of the CPU part) and running one: the CPU part's compiled code (or the interpreter when the file has
// none) runs the host's nodes, NpuCall runs the simulator.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <unistd.h>

#include "tessel/interp/interpreter.h"
#include "tessel/ops/registry.h"
#include "tessel/partition/partitioner.h"
#include "tessel/support/error.h"
#include "tessel/targets/target.h"
#include "tessel/targets/npu/model_file.h"

namespace tessel::npu {
namespace {

/// Runs one NPU subgraph by name; installed by runNpuModel for the duration of a run.
using NpuCallHandler = std::function<std::vector<Tensor>(const std::string&, const std::vector<Tensor>&)>;
thread_local const NpuCallHandler* currentHandler = nullptr;

void inferNpuCall(InferContext& ctx) {
  // The types were fixed when the subgraph was lowered and are kept in the IR.
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    if (ctx.hasOutput(i)) ctx.setOutputType(i, ctx.node().output(i)->type);
}

void npuCallKernel(KernelContext& ctx) {
  if (!currentHandler) ctx.fail("tessel.NpuCall runs only inside a compiled NPU model (tessel run MODEL.tnpu)");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) inputs.push_back(ctx.input(i));
  std::vector<Tensor> outputs = (*currentHandler)(ctx.attrString("subgraph"), inputs);
  if (outputs.size() != ctx.numOutputs()) ctx.fail("subgraph returned {} outputs, expected {}", outputs.size(), ctx.numOutputs());
  for (size_t i = 0; i < outputs.size(); ++i) ctx.setOutput(i, std::move(outputs[i]));
}

/// Replaces `old` by a node of another op with the same inputs and output names (two steps: the names
/// are only free once the old node is gone).
Node* replaceNode(Graph& g, Node* old, const std::string& op, const std::string& domain, const std::string& attr,
                  const std::string& value) {
  std::vector<std::string> temp, names;
  std::vector<TensorType> types;
  for (Value* v : old->outputs()) {
    temp.push_back(g.uniqueName(v->name() + "__call"));
    names.push_back(v->name());
    types.push_back(v->type);
  }
  std::string name = old->name(), device = old->device;
  Node* a = g.insertNodeBefore(old, op, old->inputs(), temp, g.uniqueName(name + "__call"), domain);
  for (size_t i = 0; i < types.size(); ++i) {
    a->output(i)->type = types[i];
    g.replaceAllUsesWith(old->output(i), a->output(i));
  }
  g.removeNode(old);
  Node* b = g.insertNodeBefore(a, op, a->inputs(), names, name, domain);
  for (size_t i = 0; i < types.size(); ++i) {
    b->output(i)->type = types[i];
    g.replaceAllUsesWith(a->output(i), b->output(i));
  }
  g.removeNode(a);
  b->setAttr(attr, value);
  b->device = device;
  return b;
}

std::vector<IoTensor> ioOf(const std::vector<Value*>& values) {
  std::vector<IoTensor> out;
  for (const Value* v : values)
    out.push_back({v->name(), v->type.dtype, v->type.isStatic() ? v->type.staticShape() : Shape{}});
  return out;
}

/// Loads the HOST section's library: written to a temporary file for dlopen, which keeps it mapped after the
/// file is removed.
std::shared_ptr<cpu::CompiledModel> loadHostCode(const std::vector<uint8_t>& library, int threads) {
  static std::atomic<int> counter{0};
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / fmt::format("tessel-host-{}-{}.so", getpid(), counter++);
  struct RemoveFile {
    std::filesystem::path p;
    ~RemoveFile() {
      std::error_code ec;
      std::filesystem::remove(p, ec);
    }
  } remove{file};
  {
    std::ofstream f(file, std::ios::binary);
    f.write(reinterpret_cast<const char*>(library.data()), static_cast<std::streamsize>(library.size()));
    if (!f) throw UserError(fmt::format("cannot write the host code of a .tnpu to '{}'", file.string()));
  }
  return std::make_shared<cpu::CompiledModel>(file.string(), threads);
}

}  // namespace

CompiledNpuModel compileForNpu(const Model& input, const hw::HardwareConfig& config, const ScheduleChooser& chooser) {
  if (!config.firstNpu()) throw UserError(fmt::format("configuration '{}' has no npu device", config.name()));
  std::unique_ptr<Model> owned = input.clone();
  prepareModelForNpu(*owned);
  return compilePreparedForNpu(*owned, config, chooser);
}

CompiledNpuModel compilePreparedForNpu(Model& model, const hw::HardwareConfig& config, const ScheduleChooser& chooser) {
  partition::PartitionOptions popts;
  popts.canLower = target::loweringCheck();
  partition::PartitionResult placed = partition::partitionGraph(*model.graph, config, popts);
  CompiledNpuModel out;
  out.config = config;
  out.placements = std::move(placed.placements);
  Graph& g = *model.graph;
  std::vector<Node*> calls;
  for (const auto& n : g.nodes())
    if (partition::isSubgraphNode(*n) && config.device(n->device).kind == hw::DeviceKind::Npu) calls.push_back(n.get());
  for (Node* n : calls) {
    const Graph& body = n->attrGraph("body");
    const hw::Device& device = config.device(n->device);
    out.subgraphs.push_back(chooser ? lowerSubgraph(body, device, chooser(body, device, n->name()))
                                    : lowerSubgraph(body, device, n->name()));
    replaceNode(g, n, "NpuCall", "tessel", "subgraph", out.subgraphs.back().name);
  }
  g.removeUnusedValues();
  out.inputs = ioOf(g.inputs());
  out.outputs = ioOf(g.outputs());
  out.cpuPart = model.clone();
  return out;
}

std::vector<partition::Placement> hostPlacements(const CompiledNpuModel& model) {
  std::vector<partition::Placement> out;
  for (const partition::Placement& p : model.placements)
    if (model.config.device(p.device).kind != hw::DeviceKind::Npu) out.push_back(p);
  return out;
}

NpuModelRun runNpuModel(const CompiledNpuModel& model, const std::map<std::string, Tensor>& inputs,
                        const SimOptions& options) {
  NpuModelRun run;
  std::map<std::string, const LoweredSubgraph*> byName;
  for (const LoweredSubgraph& s : model.subgraphs) byName[s.name] = &s;
  NpuCallHandler handler = [&](const std::string& name, const std::vector<Tensor>& in) {
    auto it = byName.find(name);
    if (it == byName.end()) throw UserError(fmt::format("tessel.NpuCall names subgraph '{}', which the model does not have", name));
    const hw::Device& dev = model.config.device(it->second->device);
    NpuRun r = runLowered(*it->second, dev.npu, in, options);
    for (const Tensor& t : in) run.transferBytes += t.nbytes();
    for (const Tensor& t : r.outputs) run.transferBytes += t.nbytes();
    run.subgraphs.push_back({name, std::move(r.report)});
    return r.outputs;
  };
  struct Install {
    explicit Install(const NpuCallHandler* h) { currentHandler = h; }
    ~Install() { currentHandler = nullptr; }
  } install(&handler);
  if (model.host.library.empty()) {
    run.outputs = Interpreter(*model.cpuPart->graph).run(inputs);
    return run;
  }
  // The library's tessel.NpuCall nodes reach the handler through its host fallback (the interpreter running
  // that one node), on this thread.
  // One loaded instance has one activation arena: runs of host code are serialised (Python may run a model
  // from several threads).
  static std::mutex hostRuns;
  std::lock_guard<std::mutex> serial(hostRuns);
  if (!model.host.loaded) model.host.loaded = loadHostCode(model.host.library, model.host.threads);
  run.outputs = model.host.loaded->run(inputs);
  return run;
}

const LoweredSubgraph& loweredSubgraph(const CompiledNpuModel& model, const std::string& name) {
  for (const LoweredSubgraph& l : model.subgraphs)
    if (l.name == name) return l;
  throw InternalError(fmt::format("npu run: no lowered subgraph '{}' in the model", name));
}

nlohmann::json runSummaryJson(const CompiledNpuModel& model, const NpuModelRun& run) {
  using json = nlohmann::json;
  uint64_t cycles = 0, read = 0, written = 0, macs = 0, bound = 0, scheduleBound = 0, hazards = 0, compulsory = 0;
  std::array<uint64_t, kNumBuffers> peak{}, footprint{}, capacity{};
  std::array<uint64_t, kNumUnits> busy{}, stall{};
  double mmCapacity = 0;
  json subgraphs = json::array();
  for (const SubgraphRun& s : run.subgraphs) {
    const SimReport& r = s.report;
    cycles += r.totalCycles, read += r.dramBytesRead, written += r.dramBytesWritten, macs += r.macs;
    // Subgraphs run one after another, so their bounds add up: the schedule-independent one (the work of the
    // subgraph's nodes on this machine) and the one of this program (resource and critical-path bounds).
    scheduleBound += r.bounds.bound();
    hazards += r.hazards.size();
    mmCapacity += static_cast<double>(r.totalCycles) * r.dim * r.dim;
    for (size_t b = 0; b < kNumBuffers; ++b) {
      peak[b] = std::max(peak[b], r.peakSramBytes[b]);
      footprint[b] = std::max(footprint[b], r.footprintBytes[b]);
      capacity[b] = r.capacityBytes[b];
    }
    for (size_t u = 0; u < kNumUnits; ++u) busy[u] += r.units[u].busyCycles, stall[u] += r.units[u].stallCycles;
    json j = r.toJson();
    const LoweredSubgraph& l = loweredSubgraph(model, s.name);
    compulsory += l.compulsoryDramBytes;
    const hw::NpuConfig& cfg = model.config.device(l.device).npu;
    bound += l.work.lowerBound(cfg);
    j["lower_bound_cycles"] = l.work.lowerBound(cfg);
    j["work"] = l.work.toJson(cfg);
    j.erase("hazards");
    j["name"] = s.name;
    j["hazard_count"] = r.hazards.size();
    subgraphs.push_back(j);
  }
  json bufs = json::object(), used = json::object(), caps = json::object(), units = json::object();
  for (size_t b = 0; b < kNumBuffers; ++b) {
    std::string n(bufferName(static_cast<Buffer>(b)));
    bufs[n] = peak[b];
    used[n] = footprint[b];
    caps[n] = capacity[b];
  }
  for (size_t u = 0; u < kNumUnits; ++u)
    units[std::string(unitName(static_cast<Unit>(u)))] = {{"busy", busy[u]}, {"stall", stall[u]}};
  return json{{"cycles", cycles},
              {"lower_bound_cycles", bound},
              {"schedule_bound_cycles", scheduleBound},
              {"dram_bytes", {{"read", read}, {"written", written}, {"total", read + written}, {"compulsory", compulsory}}},
              {"peak_sram_bytes", bufs},
              {"sram_footprint_bytes", used},
              {"sram_capacity_bytes", caps},
              {"mm_utilization", mmCapacity > 0 ? static_cast<double>(macs) / mmCapacity : 0.0},
              {"macs", macs},
              {"units", units},
              {"hazards", hazards},
              {"host_npu_transfer_bytes", run.transferBytes},
              {"npu_calls", run.subgraphs.size()},
              {"subgraphs", subgraphs}};
}

}  // namespace tessel::npu

namespace tessel {
TESSEL_REGISTER_OP(tessel_NpuCall) {
  return OpDef("NpuCall", "tessel")
      .inputs(0, kVariadic)
      .outputs(1, kVariadic)
      .requiredAttr("subgraph", AttrKind::String)
      .describe("runs a lowered NPU subgraph of a compiled model (.tnpu) on the simulator")
      .infer(npu::inferNpuCall)
      .kernel(npu::npuCallKernel);
}
}  // namespace tessel
