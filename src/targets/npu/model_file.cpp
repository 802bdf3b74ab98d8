// Reading and writing the .tnpu compiled model file: a checksummed list of tagged sections after a header
// with magic, version and the configuration hash. The loader validates everything before use.
#include "tessel/targets/npu/model_file.h"

#include <cstring>
#include <fmt/format.h>
#include <fstream>

#include "tessel/ir/text.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/access.h"
#include "tessel/targets/npu/verify.h"

namespace tessel::npu {
namespace {

using json = nlohmann::json;

class Writer {
 public:
  std::vector<uint8_t> bytes;
  void raw(const void* p, size_t n) { bytes.insert(bytes.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); }
  void u32(uint32_t v) { for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u64(uint64_t v) { for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void blob(const std::string& s) { u64(s.size()); raw(s.data(), s.size()); }
  void blob(const std::vector<uint8_t>& s) { u64(s.size()); raw(s.data(), s.size()); }
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, std::string origin) : p_(data), end_(data + size), origin_(std::move(origin)) {}
  [[noreturn]] void fail(const std::string& what) const { throw UserError(fmt::format("{}: corrupt .tnpu file: {}", origin_, what)); }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* take(size_t n, const char* what) {
    if (n > left()) fail(fmt::format("{} needs {} bytes, {} left", what, n, left()));
    const uint8_t* r = p_;
    p_ += n;
    return r;
  }
  uint32_t u32(const char* what) {
    const uint8_t* b = take(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{b[i]} << (8 * i);
    return v;
  }
  uint64_t u64(const char* what) {
    const uint8_t* b = take(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{b[i]} << (8 * i);
    return v;
  }
  std::string blob(const char* what) {
    uint64_t n = u64(what);
    if (n > left()) fail(fmt::format("{} of {} bytes exceeds the {} bytes left", what, n, left()));
    const uint8_t* b = take(static_cast<size_t>(n), what);
    return std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
  }
  bool done() const { return p_ == end_; }
  const std::string& origin() const { return origin_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  std::string origin_;
};

uint32_t tag(const char (&t)[5]) { return uint32_t(t[0]) | uint32_t(t[1]) << 8 | uint32_t(t[2]) << 16 | uint32_t(t[3]) << 24; }

json ioJson(const std::vector<IoTensor>& v) {
  json a = json::array();
  for (const IoTensor& t : v) a.push_back({{"name", t.name}, {"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape}});
  return a;
}

json dramTensorsJson(const std::vector<DramTensor>& v) {
  json a = json::array();
  for (const DramTensor& t : v)
    a.push_back({{"name", t.name}, {"shape", t.shape}, {"channels_last", t.channelsLast}, {"addr", t.addr}, {"words", t.words}});
  return a;
}

std::string subgraphMeta(const LoweredSubgraph& s) {
  json ops = json::array();
  for (const LoweredOp& op : s.ops)
    ops.push_back({{"node", op.node}, {"op", op.opType}, {"count", op.instructions}, {"tiling", op.tiling}});
  json meta = {{"name", s.name},           {"device", s.device},       {"dram_words", s.dramWords},
               {"compulsory_dram_bytes", s.compulsoryDramBytes},       {"inputs", dramTensorsJson(s.inputs)},
               {"outputs", dramTensorsJson(s.outputs)},                {"ops", ops},
               {"schedule", s.schedule.toJson()},                      {"modelled_cycles", s.modelledCycles},
               {"work", {{"macs", s.work.macs}, {"vector_lane_cycles", s.work.vectorCycles},
                         {"depthwise_macs", s.work.depthwiseMacs},
                         {"compulsory_load_bytes", s.work.compulsoryLoadBytes},
                         {"compulsory_store_bytes", s.work.compulsoryStoreBytes}}}};
  return meta.dump();
}

}  // namespace

std::vector<uint8_t> serializeNpuModel(const CompiledNpuModel& model) {
  Writer payload;
  auto section = [&](uint32_t t, const Writer& w) {
    payload.u32(t);
    payload.blob(w.bytes);
  };
  Writer conf;
  conf.raw(model.config.canonicalJson().data(), model.config.canonicalJson().size());
  section(tag("CONF"), conf);
  Writer io;
  std::string ioText = json{{"inputs", ioJson(model.inputs)}, {"outputs", ioJson(model.outputs)}}.dump();
  io.raw(ioText.data(), ioText.size());
  section(tag("IODS"), io);
  std::string side;
  std::string text = printModelText(*model.cpuPart, {}, &side, "cpu-part.bin");
  Writer cpu;
  cpu.blob(text);
  cpu.blob(side);
  section(tag("CPUP"), cpu);
  if (!model.host.library.empty()) {
    Writer host;
    host.blob(json{{"hash", model.host.hash}}.dump());
    host.blob(model.host.library);
    section(tag("HOST"), host);
  }
  for (const LoweredSubgraph& s : model.subgraphs) {
    Writer w;
    w.blob(subgraphMeta(s));
    w.blob(encodeProgram(s.program));
    w.u64(s.instructionOp.size());
    for (uint32_t op : s.instructionOp) w.u32(op);
    w.u64(s.constants.size());
    w.raw(s.constants.data(), s.constants.size() * sizeof(float));
    section(tag("SUBG"), w);
  }
  Writer file;
  file.raw(kModelFileMagic, sizeof(kModelFileMagic));
  file.u32(kModelFileVersion);
  file.u64(model.config.hash());
  file.blob(payload.bytes);
  file.u64(hw::fnv1a64(std::string(payload.bytes.begin(), payload.bytes.end())));
  return file.bytes;
}

void writeNpuModel(const CompiledNpuModel& model, const std::string& path) {
  std::vector<uint8_t> bytes = serializeNpuModel(model);
  std::ofstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot write '{}'", path));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw UserError(fmt::format("cannot write '{}'", path));
}

namespace {

json parseJson(const std::string& text, const Reader& r, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    r.fail(fmt::format("{} is not valid JSON ({})", what, e.what()));
  }
}

Shape shapeFrom(const json& j, const Reader& r) {
  if (!j.is_array() || j.size() > 8) r.fail("a shape is not an array of at most 8 dimensions");
  Shape s;
  int64_t total = 1;
  for (const json& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 32)) r.fail("a shape has a bad dimension");
    s.push_back(d.get<int64_t>());
    total *= std::max<int64_t>(s.back(), 1);
    if (total > (int64_t{1} << 34)) r.fail("a shape is too large");
  }
  return s;
}

std::vector<IoTensor> ioFrom(const json& j, const Reader& r) {
  if (!j.is_array()) r.fail("I/O description is not an array");
  std::vector<IoTensor> out;
  for (const json& t : j) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") || !t.contains("dtype") ||
        !t["dtype"].is_string())
      r.fail("an I/O entry lacks name, dtype or shape");
    IoTensor io{t["name"].get<std::string>(), parseDType(t["dtype"].get<std::string>()), shapeFrom(t["shape"], r)};
    if (io.dtype == DType::Undefined) r.fail(fmt::format("I/O entry '{}' has an unknown dtype", io.name));
    out.push_back(io);
  }
  return out;
}

std::vector<DramTensor> dramTensorsFrom(const json& j, uint64_t dramWords, const Reader& r) {
  if (!j.is_array()) r.fail("subgraph tensors are not an array");
  std::vector<DramTensor> out;
  for (const json& t : j) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("addr") ||
        !t["addr"].is_number_unsigned() || !t.contains("words") || !t["words"].is_number_unsigned() ||
        !t.contains("channels_last") || !t["channels_last"].is_boolean() || !t.contains("shape"))
      r.fail("a subgraph tensor lacks name, shape, channels_last, addr or words");
    DramTensor d{t["name"].get<std::string>(), shapeFrom(t["shape"], r), t["channels_last"].get<bool>(),
                 t["addr"].get<uint64_t>(), t["words"].get<uint64_t>()};
    if (d.words != static_cast<uint64_t>(std::max<int64_t>(shapeSize(d.shape), 1)) || (d.channelsLast && d.shape.size() != 4))
      r.fail(fmt::format("subgraph tensor '{}' has an inconsistent shape", d.name));
    if (d.addr > dramWords || d.words > dramWords - d.addr) r.fail(fmt::format("subgraph tensor '{}' lies outside DRAM", d.name));
    out.push_back(d);
  }
  return out;
}

LoweredSubgraph subgraphFrom(Reader& sec, const hw::HardwareConfig& config, const Reader& r) {
  json meta = parseJson(sec.blob("subgraph metadata"), r, "subgraph metadata");
  LoweredSubgraph s;
  if (!meta.is_object() || !meta.contains("name") || !meta["name"].is_string() || !meta.contains("device") ||
      !meta["device"].is_string() || !meta.contains("dram_words") || !meta["dram_words"].is_number_unsigned() ||
      !meta.contains("inputs") || !meta.contains("outputs"))
    r.fail("subgraph metadata lacks name, device, dram_words, inputs or outputs");
  s.name = meta["name"].get<std::string>();
  s.device = meta["device"].get<std::string>();
  s.dramWords = meta["dram_words"].get<uint64_t>();
  if (s.dramWords > (uint64_t{1} << 31)) r.fail(fmt::format("subgraph '{}' has a DRAM image over 8 GiB", s.name));
  if (meta.contains("compulsory_dram_bytes") && meta["compulsory_dram_bytes"].is_number_unsigned())
    s.compulsoryDramBytes = meta["compulsory_dram_bytes"].get<uint64_t>();
  s.inputs = dramTensorsFrom(meta["inputs"], s.dramWords, r);
  s.outputs = dramTensorsFrom(meta["outputs"], s.dramWords, r);
  if (!meta.contains("ops") || !meta["ops"].is_array()) r.fail(fmt::format("subgraph '{}' lacks its op list", s.name));
  for (const json& op : meta["ops"]) {
    if (!op.is_object() || !op.value("node", json()).is_string() || !op.value("op", json()).is_string() ||
        !op.value("count", json()).is_number_unsigned() || !op.value("tiling", json()).is_string())
      r.fail(fmt::format("subgraph '{}': an op entry lacks node, op, count or tiling", s.name));
    s.ops.push_back({op["node"].get<std::string>(), op["op"].get<std::string>(), op["count"].get<size_t>(),
                     op["tiling"].get<std::string>()});
  }
  if (!meta.contains("schedule")) r.fail(fmt::format("subgraph '{}' lacks its schedule", s.name));
  s.schedule = NpuSchedule::fromJson(meta["schedule"], r.origin() + " (subgraph " + s.name + ")");
  if (meta.contains("modelled_cycles") && meta["modelled_cycles"].is_number_unsigned())
    s.modelledCycles = meta["modelled_cycles"].get<uint64_t>();
  const json& work = meta.value("work", json());
  for (const char* key : {"macs", "vector_lane_cycles", "compulsory_load_bytes", "compulsory_store_bytes"})
    if (!work.is_object() || !work.contains(key) || !work[key].is_number_unsigned())
      r.fail(fmt::format("subgraph '{}': work.{} missing or not an unsigned integer", s.name, key));
  s.work = SubgraphWork{};
  s.work.macs = work["macs"].get<uint64_t>();
  s.work.vectorCycles = work["vector_lane_cycles"].get<uint64_t>();
  s.work.compulsoryLoadBytes = work["compulsory_load_bytes"].get<uint64_t>();
  s.work.compulsoryStoreBytes = work["compulsory_store_bytes"].get<uint64_t>();
  // Files written before depthwise work was counted apart hold it in vector_lane_cycles (and have no such key).
  if (work.contains("depthwise_macs")) {
    if (!work["depthwise_macs"].is_number_unsigned())
      r.fail(fmt::format("subgraph '{}': work.depthwise_macs is not an unsigned integer", s.name));
    s.work.depthwiseMacs = work["depthwise_macs"].get<uint64_t>();
  }
  std::string prog = sec.blob("instruction stream");
  if (prog.size() % 32 != 0) r.fail(fmt::format("subgraph '{}': instruction stream is not a multiple of 32 bytes", s.name));
  try {
    s.program = decodeProgram(std::vector<uint8_t>(prog.begin(), prog.end()));
  } catch (const UserError& e) {
    r.fail(fmt::format("subgraph '{}': {}", s.name, e.what()));
  }
  const uint64_t owners = sec.u64("instruction owner count");
  if (owners != s.program.instructions.size() || owners > sec.left() / 4)
    r.fail(fmt::format("subgraph '{}': {} instruction owners for {} instructions", s.name, owners, s.program.instructions.size()));
  s.instructionOp.resize(static_cast<size_t>(owners));
  for (uint32_t& op : s.instructionOp) {
    op = sec.u32("instruction owner");
    if (op >= s.ops.size()) r.fail(fmt::format("subgraph '{}': an instruction names op {} of {}", s.name, op, s.ops.size()));
  }
  uint64_t count = sec.u64("constant count");
  if (count > s.dramWords || count > sec.left() / 4) r.fail(fmt::format("subgraph '{}': bad constant count", s.name));
  s.constants.resize(static_cast<size_t>(count));
  const void* words = sec.take(static_cast<size_t>(count) * 4, "constants");
  if (count != 0) std::memcpy(s.constants.data(), words, static_cast<size_t>(count) * 4);  // no constants: data() may be null
  const hw::Device* dev = nullptr;
  for (const hw::Device& d : config.devices())
    if (d.name == s.device && d.kind == hw::DeviceKind::Npu) dev = &d;
  if (!dev) r.fail(fmt::format("subgraph '{}' names device '{}', which is not an NPU of the configuration", s.name, s.device));
  const std::vector<std::string> problems = programProblems(s, dev->npu);
  if (!problems.empty()) {
    std::string msg = fmt::format("subgraph '{}': the program fails verification", s.name);
    for (const std::string& p : problems) msg += "\n  " + p;
    r.fail(msg);
  }
  return s;
}

}  // namespace

CompiledNpuModel parseNpuModel(const std::vector<uint8_t>& bytes, const std::string& origin) {
  Reader r(bytes.data(), bytes.size(), origin);
  const uint8_t* magic = r.take(sizeof(kModelFileMagic), "magic");
  if (std::memcmp(magic, kModelFileMagic, sizeof(kModelFileMagic)) != 0)
    throw UserError(fmt::format("{}: not a Tessel NPU model (.tnpu): bad magic", origin));
  uint32_t version = r.u32("version");
  if (version < kOldestModelFileVersion || version > kModelFileVersion)
    throw UserError(fmt::format("{}: .tnpu version {} is not supported (this tessel reads versions {} to {}; "
                                "recompile the model)", origin, version, kOldestModelFileVersion, kModelFileVersion));
  uint64_t hash = r.u64("configuration hash");
  std::string payload = r.blob("payload");
  uint64_t checksum = r.u64("checksum");
  if (!r.done()) r.fail("trailing bytes after the checksum");
  if (hw::fnv1a64(payload) != checksum) r.fail("checksum mismatch");
  Reader p(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), origin);
  CompiledNpuModel m;
  bool haveConfig = false, haveIo = false, haveCpu = false;
  while (!p.done()) {
    uint32_t t = p.u32("section tag");
    std::string body = p.blob("section");
    Reader sec(reinterpret_cast<const uint8_t*>(body.data()), body.size(), origin);
    if (t == tag("CONF")) {
      m.config = hw::HardwareConfig::fromJson(parseJson(body, r, "configuration"), origin + " (embedded configuration)");
      if (m.config.hash() != hash) r.fail("the embedded configuration does not match the header's hash");
      haveConfig = true;
    } else if (t == tag("IODS")) {
      json io = parseJson(body, r, "I/O description");
      if (!io.is_object() || !io.contains("inputs") || !io.contains("outputs")) r.fail("I/O description lacks inputs/outputs");
      m.inputs = ioFrom(io["inputs"], r);
      m.outputs = ioFrom(io["outputs"], r);
      haveIo = true;
    } else if (t == tag("CPUP")) {
      std::string text = sec.blob("CPU part text"), side = sec.blob("CPU part constants");
      m.cpuPart = parseModelText(text, origin + " (CPU part)", side);
      haveCpu = true;
    } else if (t == tag("HOST") && version >= 3) {
      if (!m.host.library.empty()) r.fail("two HOST sections");
      json meta = parseJson(sec.blob("host code metadata"), r, "host code metadata");
      if (!meta.is_object() || !meta.contains("hash") || !meta["hash"].is_string()) r.fail("host code metadata lacks its hash");
      m.host.hash = meta["hash"].get<std::string>();
      std::string lib = sec.blob("host code library");
      if (lib.size() < 4 || lib.compare(0, 4, "\x7f" "ELF") != 0) r.fail("the host code is not a shared library (ELF)");
      m.host.library.assign(lib.begin(), lib.end());
    } else if (t == tag("SUBG")) {
      if (!haveConfig) r.fail("a subgraph precedes the configuration");
      m.subgraphs.push_back(subgraphFrom(sec, m.config, r));
    } else {
      r.fail(fmt::format("unknown section tag 0x{:08x}", t));
    }
  }
  if (!haveConfig || !haveIo || !haveCpu) r.fail("a required section (configuration, I/O, CPU part) is missing");
  return m;
}

CompiledNpuModel readNpuModel(const std::string& path, const hw::HardwareConfig* expected) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot open '{}'", path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CompiledNpuModel m = parseNpuModel(bytes, path);
  if (expected && expected->hash() != m.config.hash())
    throw UserError(fmt::format("{} was compiled for configuration '{}' (hash {}), not for '{}' (hash {}): recompile it "
                                "with --hw for this configuration",
                                path, m.config.name(), m.config.hashHex(), expected->name(), expected->hashHex()));
  return m;
}

}  // namespace tessel::npu
