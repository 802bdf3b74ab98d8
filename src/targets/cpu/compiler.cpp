// The cpu compile driver: lowering + memory planning + C++ emission, then the host C++ compiler
// (the runtime library is built once per compiler/--march and cached).
#include "tessel/targets/cpu/compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>
#include <csignal>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

#include "host_compiler.h"
#include "kernel_rules.h"
#include "plan.h"
#include "tessel/ir/text.h"
#include "tessel/passes/pass.h"
#include "tessel/support/data_paths.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/tuner.h"

namespace fs = std::filesystem;

namespace tessel::cpu {
namespace {

uint64_t fnv1a(const std::string& data, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : data) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot read '{}'", p.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw UserError(fmt::format("cannot write '{}'", p.string()));
}

void progress(const CompileOptions& o, const std::string& msg) {
  if (o.progress) o.progress(msg);
}

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string compilerOf(const CompileOptions& o) {
  if (!o.cxx.empty()) return o.cxx;
  const char* env = std::getenv("CXX");
  return env && *env ? env : "g++";
}

/// Runs a shell command, capturing its output; shows elapsed seconds while it runs when asked.
int runCommand(const std::string& cmd, std::string& output, const CompileOptions& o, const std::string& what) {
  fs::path log = fs::temp_directory_path() / fmt::format("tessel-cxx-{}-{}.log", getpid(), fnv1a(cmd));
  auto start = std::chrono::steady_clock::now();
  auto fut = std::async(std::launch::async, [&] { return std::system((cmd + " > " + shellQuote(log.string()) + " 2>&1").c_str()); });
  bool tty = isatty(STDERR_FILENO) && o.progress;
  while (fut.wait_for(std::chrono::milliseconds(500)) != std::future_status::ready) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tty) fmt::print(stderr, "\r  {} ... {:.0f} s", what, s);
  }
  if (tty) fmt::print(stderr, "\r\033[K");
  int rc = fut.get();
  std::error_code ec;
  if (fs::exists(log, ec)) output = readFile(log);
  fs::remove(log, ec);
  return rc;
}

std::string tail(const std::string& s, size_t n = 3000) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

std::string cxxFlags(const CompileOptions& o) {
  return fmt::format("-std=c++20 -O3 {} -mavx2 -mfma -mf16c -fPIC -fvisibility=hidden", isaFlags(o));
}

/// Checks the compiler exists and accepts --march (one clear error for each).
void checkCompiler(const CompileOptions& o) {
  std::string cxx = compilerOf(o), out;
  CompileOptions quiet;
  if (runCommand("command -v " + shellQuote(cxx), out, quiet, "") != 0)
    throw UserError(fmt::format("C++ compiler '{}' not found (install g++ or set CXX / --cxx)", cxx));
  if (runCommand(fmt::format("echo 'int main(){{}}' | {} -march={} -x c++ -c -o /dev/null -", shellQuote(cxx),
                             shellQuote(o.march)), out, quiet, "") != 0)
    throw UserError(fmt::format("--march={} is not supported by '{}' (valid values: {} --help=target)", o.march,
                                cxx, cxx));
}

fs::path cacheRoot() {
  if (const char* d = std::getenv("TESSEL_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "tessel";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "tessel";
  return fs::temp_directory_path() / "tessel-cache";
}

fs::path runtimeDir() { return dataPaths().runtimeDir; }

/// Creates a cache directory; a directory that cannot be made is the user's environment, not a bug.
void makeCacheDirectory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir) || access(dir.c_str(), W_OK) != 0)
    throw UserError(fmt::format("cannot use the cache directory '{}': {}; point TESSEL_CACHE_DIR at a writable "
                                "directory", dir.string(), ec ? ec.message() : "not a writable directory"));
}

/// The key of the compiler, its flags and every runtime header (what an object built against the runtime's
/// headers depends on besides its own source); `sources` gets the runtime's .cpp files, sorted.
uint64_t runtimeHeadersKey(const CompileOptions& o, std::vector<fs::path>* sources = nullptr) {
  std::string version;
  runCommand(shellQuote(compilerOf(o)) + " --version", version, {}, "");
  std::vector<fs::path> found, headerFiles;
  for (const auto& e : fs::recursive_directory_iterator(runtimeDir())) {
    if (!e.is_regular_file()) continue;
    // runtime/tools holds programs built against the library (the conv tuner), not part of it.
    if (*e.path().lexically_relative(runtimeDir()).begin() == "tools") continue;
    (e.path().extension() == ".cpp" ? found : headerFiles).push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  std::sort(headerFiles.begin(), headerFiles.end());
  // Keyed by paths inside the runtime, in sorted order, so a build tree and an installed copy share the cache.
  uint64_t headers = fnv1a(version + cxxFlags(o));
  for (const fs::path& h : headerFiles) headers = fnv1a(h.lexically_relative(runtimeDir()).string() + readFile(h), headers);
  if (sources) *sources = std::move(found);
  return headers;
}

/// Builds (or finds cached) a PIC static library of the runtime for this compiler and flags. Objects
/// are cached one per source (keyed by the source, every header and the flags), so an edit to one
/// kernel file recompiles only that file.
fs::path ensureRuntimeLibrary(const CompileOptions& o) {
  std::string cxx = compilerOf(o);
  std::vector<fs::path> sources;
  const uint64_t headers = runtimeHeadersKey(o, &sources);
  fs::path objDir = cacheRoot() / "runtime-objects";
  makeCacheDirectory(objDir);
  uint64_t libKey = headers;
  std::vector<fs::path> objects;
  std::string missing;
  for (const fs::path& src : sources) {
    uint64_t key = fnv1a(src.filename().string() + readFile(src), headers);
    libKey = fnv1a(std::to_string(key), libKey);
    fs::path obj = objDir / fmt::format("{}-{:016x}.o", src.stem().string(), key);
    objects.push_back(obj);
    if (!fs::exists(obj)) missing += shellQuote(src.string()) + ":" + shellQuote(obj.string()) + " ";
  }
  fs::path lib = cacheRoot() / fmt::format("libtessel_rt-{:016x}.a", libKey);
  if (fs::exists(lib)) return lib;
  std::string out;
  if (!missing.empty()) {
    progress(o, fmt::format("compiling the runtime library for {} (cached in {})", isaFlags(o), objDir.string()));
    // Each object is written under a temporary name and renamed, so concurrent compiles never see half files.
    std::string cmd = fmt::format(
        "printf '%s\\n' {} | xargs -P 2 -I PAIR sh -c 'src=${{1%%:*}}; obj=${{1#*:}}; {} {} -I{} -c \"$src\" -o "
        "\"$obj.$$\" && mv \"$obj.$$\" \"$obj\"' _ PAIR",
        missing, shellQuote(cxx), cxxFlags(o), shellQuote((runtimeDir() / "include").string()));
    if (runCommand(cmd, out, o, "compiling the runtime") != 0)
      throw UserError(fmt::format("building the runtime library failed:\n{}", tail(out)));
  }
  std::string objs;
  for (const fs::path& obj : objects) objs += shellQuote(obj.string()) + " ";
  fs::path tmp = lib.string() + fmt::format(".tmp{}", getpid());
  if (runCommand(fmt::format("ar rcs {} {}", shellQuote(tmp.string()), objs), out, {}, "") != 0)
    throw UserError(fmt::format("archiving the runtime library failed:\n{}", tail(out)));
  fs::rename(tmp, lib);
  return lib;
}

std::string abiHeader() { return readFile(dataPaths().abiHeader); }

/// A precompiled header of the includes every generated source starts with (generatedIncludes()), built
/// once per compiler, flags and runtime headers and cached: the `-include` option that makes the C++
/// compiler load it instead of parsing the headers again (the source's own #includes are then no-ops), or
/// "" when it cannot be built (the compile parses the headers, as without it).
std::string precompiledIncludes(const CompileOptions& o) {
  const std::string text = generatedIncludes(), abi = abiHeader();
  const fs::path dir = cacheRoot() / fmt::format("prelude-{:016x}", fnv1a(text + abi + "-pthread", runtimeHeadersKey(o)));
  const fs::path header = dir / "tessel_prelude.h";
  const std::string use = "-Winvalid-pch -include " + shellQuote(header.string());
  if (fs::exists(header.string() + ".gch")) return use;
  makeCacheDirectory(cacheRoot());
  // Built in a directory of its own and renamed into place, so concurrent compiles never see half a header.
  const fs::path tmp = dir.string() + fmt::format(".tmp{}", getpid());
  std::error_code ec;
  fs::create_directories(tmp, ec);
  writeFile(tmp / "tessel_prelude.h", text);
  writeFile(tmp / "tessel_model_abi.h", abi);
  std::string out;
  const int rc = runCommand(fmt::format("cd {} && {} {} -I{} -I. -pthread -x c++-header tessel_prelude.h -o tessel_prelude.h.gch",
                                        shellQuote(tmp.string()), shellQuote(compilerOf(o)), cxxFlags(o),
                                        shellQuote((runtimeDir() / "include").string())),
                            out, o, "precompiling the generated code's headers");
  if (rc == 0) fs::rename(tmp, dir, ec);  // another compile may have placed it first: then ours goes
  fs::remove_all(tmp, ec);
  return rc == 0 && fs::exists(header.string() + ".gch") ? use : "";
}

fs::path tunerSource() { return runtimeDir() / "tools" / "conv_tuner.cpp"; }

/// Builds (or finds cached) the conv tuner for this compiler and --march: runtime/tools/conv_tuner.cpp
/// compiled with the runtime's flags and linked against the cached runtime library of the same flags.
fs::path ensureTuner(const CompileOptions& o) {
  fs::path lib = ensureRuntimeLibrary(o);  // its name carries the key of the flags, compiler and sources
  fs::path exe = cacheRoot() / fmt::format("conv-tuner-{:016x}", fnv1a(readFile(tunerSource()), fnv1a(lib.filename().string())));
  if (fs::exists(exe)) return exe;
  fs::path tmp = exe.string() + fmt::format(".tmp{}", getpid());
  std::string out;
  std::string cmd = fmt::format("{} {} -I{} -o {} {} {} -pthread", shellQuote(compilerOf(o)), cxxFlags(o),
                                shellQuote((runtimeDir() / "include").string()), shellQuote(tmp.string()),
                                shellQuote(tunerSource().string()), shellQuote(lib.string()));
  if (runCommand(cmd, out, o, "building the conv tuner") != 0)
    throw UserError(fmt::format("--tune: building the kernel tuner for {} failed:\n{}", isaFlags(o), tail(out)));
  fs::rename(tmp, exe);
  return exe;
}

/// How a command run through the shell ended, for an error message.
std::string exitDescription(int status, const std::string& march) {
  int sig = 0;
  if (WIFSIGNALED(status)) sig = WTERMSIG(status);
  else if (WIFEXITED(status) && WEXITSTATUS(status) > 128) sig = WEXITSTATUS(status) - 128;  // reported by sh
  if (sig == SIGILL)
    return fmt::format("illegal instruction: this CPU cannot run code built for -march={}; {}", march,
                       march == "native" ? "compile without --tune"
                                         : "tune with a --march this machine supports (e.g. native), or "
                                           "compile without --tune and reuse a tuning file made on the target");
  if (sig != 0) return fmt::format("killed by signal {} ({})", sig, strsignal(sig));
  return fmt::format("exit status {}", WIFEXITED(status) ? WEXITSTATUS(status) : status);
}

/// --tune keeps the untuned kernel unless another candidate is faster by more than this fraction.
constexpr double kTuneSwitchMargin = 0.05;

/// --tune: times every candidate of every conv geometry with the tuner of options.march and puts the
/// fastest in `choices`; `saved` gets what the tuning file records besides the choices.
void tuneConvKernels(const Graph& graph, const CompileOptions& o, std::map<std::string, std::string>& choices,
                     CompileReport& report, nlohmann::json& saved) {
  auto start = std::chrono::steady_clock::now();
  std::vector<ConvTuneJob> jobs = convTuneJobs(graph, targetHasAvx512(o));
  size_t runs = 0;
  for (const ConvTuneJob& j : jobs) runs += j.candidates.size();
  progress(o, fmt::format("tuning: timing {} candidate kernels on {} conv geometries with the runtime built for "
                          "{}", runs, jobs.size(), isaFlags(o)));
  if (jobs.empty()) return;
  ConvTimings t = timeConvKernels(jobs, o);
  nlohmann::json times = nlohmann::json::object();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ConvTuneJob& j = jobs[i];
    std::string best = j.untuned;
    double bestMs = 1e30, untunedMs = -1;
    nlohmann::json row = nlohmann::json::object();
    for (size_t c = 0; c < j.candidates.size(); ++c) {
      double ms = t.ms[i][c];
      row[j.candidates[c]] = ms < 0 ? nlohmann::json(nullptr) : nlohmann::json(ms);
      if (ms >= 0 && ms < bestMs) bestMs = ms, best = j.candidates[c];
      if (j.candidates[c] == j.untuned) untunedMs = ms;
    }
    // Near-ties are noise on a loaded machine; keeping the runtime's own choice for them makes tuned
    // builds repeatable.
    if (untunedMs >= 0 && bestMs > (1.0 - kTuneSwitchMargin) * untunedMs) best = j.untuned;
    times[j.key] = row;
    choices[j.key] = best;
    report.tunedChanged += best != j.untuned;
  }
  report.tunedConvs = static_cast<int>(jobs.size());
  report.tunerVectorLanes = t.vectorLanes;
  report.tuneSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  saved["tuner"] = {{"march", o.march}, {"isa", targetIsa(o)}, {"compiler", compilerOf(o)}, {"vector_lanes", t.vectorLanes},
                    {"switch_margin", kTuneSwitchMargin}};
  saved["conv_times_ms"] = times;
  progress(o, fmt::format("  tuned in {:.1f} s by a build with {}-lane vectors: {} of {} kernel choices differ from "
                          "the untuned ones", report.tuneSeconds, t.vectorLanes, report.tunedChanged, jobs.size()));
}

/// Fails early (before the long compile) when outPath cannot be written: creates (and removes) a file
/// next to it, which also catches directories where access() says yes but files cannot be made (/proc).
void checkWritable(const fs::path& outPath) {
  fs::path parent = outPath.parent_path().empty() ? fs::path(".") : outPath.parent_path();
  if (!fs::is_directory(parent))
    throw UserError(fmt::format("cannot write '{}': directory '{}' does not exist", outPath.string(), parent.string()));
  if (fs::is_directory(outPath)) throw UserError(fmt::format("cannot write '{}': it is a directory", outPath.string()));
  if (fs::exists(outPath) && access(outPath.c_str(), W_OK) != 0)
    throw UserError(fmt::format("cannot write '{}': permission denied", outPath.string()));
  fs::path probe = outPath.string() + fmt::format(".probe{}", getpid());
  {
    std::ofstream f(probe, std::ios::binary);
    if (!f) throw UserError(fmt::format("cannot write '{}': {}", outPath.string(), std::strerror(errno)));
  }
  std::error_code ec;
  fs::remove(probe, ec);
}

/// Moves `from` to `to` atomically: renamed when on the same file system, else copied next to `to` first.
void placeFile(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (!ec) return;
  fs::path tmp = to.string() + fmt::format(".tmp{}", getpid());
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw UserError(fmt::format("cannot write '{}': {}", to.string(), ec.message()));
  }
}

}  // namespace

std::string avx512OffFlag(const CompileOptions& o) {
  if (o.isa != "auto" && o.isa != "avx2" && o.isa != "avx512")
    throw UserError(fmt::format("--isa {}: expected avx2, avx512 or auto", o.isa));
  // -mno-avx512f also turns off every AVX-512 extension (they imply AVX-512F), so __AVX512F__ and the
  // 16-lane kernels are gone while -march keeps tuning for this CPU.
  return o.isa == "avx2" ? " -mno-avx512f" : "";
}

std::string isaFlags(const CompileOptions& o) { return "-march=" + o.march + avx512OffFlag(o); }

bool targetHasAvx512(const CompileOptions& o) {
  const std::string flags = isaFlags(o);
  if (o.isa == "avx2") return false;
  std::string out;
  CompileOptions quiet;
  const bool has = runCommand(fmt::format("{} {} -dM -E -x c++ /dev/null", shellQuote(compilerOf(o)), flags), out,
                              quiet, "") == 0 &&
                   out.find("#define __AVX512F__ 1") != std::string::npos;
  if (o.isa == "avx512" && !has)
    throw UserError(fmt::format("--isa avx512: -march={} has no AVX-512F{} (use --isa avx2, or a --march with "
                                "AVX-512 such as skylake-avx512 to build for another machine)",
                                o.march, o.march == "native" ? " on this CPU" : ""));
  return has;
}

std::string targetIsa(const CompileOptions& o) { return targetHasAvx512(o) ? "avx512" : "avx2"; }

std::unique_ptr<Model> withTunedChoices(const Model& model, const TuningChoices& choices,
                                        const CompileOptions& options) {
  std::unique_ptr<Model> tuned = model.clone();
  PassOptions passOptions = passPipeline(options).options;
  for (const auto& [geometry, kernel] : choices.kernels) passOptions.values[kTunedKernelOption + geometry] = kernel;
  for (const auto& [region, layout] : choices.layouts) passOptions.values[kRegionOption + region] = layout;
  if (choices.layouts.empty())
    PassPipeline({"select-kernels"}).run(*tuned, passOptions);
  else
    PassPipeline({"select-layout", "select-kernels"}).run(*tuned, passOptions);
  return tuned;
}

ConvTimings timeConvKernels(const std::vector<ConvTuneJob>& jobs, const CompileOptions& options) {
  checkCompiler(options);
  fs::path exe = ensureTuner(options);
  fs::path work = fs::temp_directory_path() / fmt::format("tessel-tune-{}", getpid());
  fs::create_directories(work);
  std::string text;
  for (const ConvTuneJob& j : jobs) text += fmt::format("{} {}\n", convGeometryKey(j.shape), fmt::join(j.candidates, " "));
  writeFile(work / "jobs.txt", text);
  std::string out;
  int rc = runCommand(fmt::format("{} {} {}", shellQuote(exe.string()), shellQuote((work / "jobs.txt").string()),
                                  shellQuote((work / "times.json").string())),
                      out, options, "timing the candidate kernels");
  std::error_code ec;
  if (rc != 0) {
    fs::remove_all(work, ec);
    throw UserError(fmt::format("--tune: the kernel tuner ({}) failed: {}{}", exe.string(),
                                exitDescription(rc, options.march), out.empty() ? "" : "\n" + tail(out)));
  }
  ConvTimings t;
  try {
    nlohmann::json j = nlohmann::json::parse(readFile(work / "times.json"));
    t.vectorLanes = j.at("vector_lanes").get<int>();
    for (const auto& row : j.at("times_ms")) {
      std::vector<double> ms;
      for (const auto& v : row) ms.push_back(v.is_null() ? -1.0 : v.get<double>());
      t.ms.push_back(std::move(ms));
    }
  } catch (const nlohmann::json::exception& e) {
    fs::remove_all(work, ec);
    throw UserError(fmt::format("--tune: unreadable output from the kernel tuner ({}): {}", exe.string(), e.what()));
  }
  fs::remove_all(work, ec);
  bool complete = t.ms.size() == jobs.size();
  for (size_t i = 0; complete && i < jobs.size(); ++i) complete = t.ms[i].size() == jobs[i].candidates.size();
  if (!complete)
    throw UserError(fmt::format("--tune: the kernel tuner ({}) answered {} of {} conv geometries", exe.string(),
                                t.ms.size(), jobs.size()));
  return t;
}

GeneratedModel generateModel(const Model& model, const CompileOptions& options, const std::string& weightsFileName) {
  auto start = std::chrono::steady_clock::now();
  TuningChoices choices;
  // The tuning file is tied to the model by a hash of its printed graph (structure, shapes, attributes).
  std::string modelKey = fmt::format("{:016x}", fnv1a(printGraphText(*model.graph)));
  if (!options.tuningFile.empty() && !options.tune)
    choices = parseTuningFile(readFile(options.tuningFile), options.tuningFile, modelKey);
  CompileReport tuning;
  nlohmann::json saved = nlohmann::json::object();
  if (options.tune) tuneConvKernels(*model.graph, options, choices.kernels, tuning, saved);
  const std::unique_ptr<Model> tuned = choices.empty() ? nullptr : withTunedChoices(model, choices, options);
  Plan plan = lowerGraph(tuned ? *tuned->graph : *model.graph, options);
  if (!options.tuningFile.empty() && options.tune) {
    saved["model"] = modelKey;
    saved["conv_kernels"] = choices.kernels;
    writeFile(options.tuningFile, saved.dump(2) + "\n");
  }
  planMemory(plan);
  plan.defaultThreads = options.defaultThreads;
  uint64_t h = fnv1a(plan.weights);
  h = fnv1a(plan.globals + plan.initCode + options.march + avx512OffFlag(options), h);
  for (const PlanStep& s : plan.steps) h = fnv1a(s.code, h);
  plan.report.hash = fmt::format("{:016x}", h);
  for (const PlanFallback& f : plan.fallbacks) {
    plan.report.fallbackNodes.push_back(f.description);
    plan.report.hostSteps.push_back({f.description, f.op, f.reason});
  }
  GeneratedModel g;
  g.source = emitSource(plan, weightsFileName, model.graph->name());
  g.weights = std::move(plan.weights);
  g.report = plan.report;
  g.report.isa = targetIsa(options);
  g.report.tunedConvs = tuning.tunedConvs;
  g.report.tunedChanged = tuning.tunedChanged;
  g.report.tunerVectorLanes = tuning.tunerVectorLanes;
  g.report.tuneSeconds = tuning.tuneSeconds;
  g.report.generateSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return g;
}

CompileReport emitSource(const Model& model, const std::string& outPath, const CompileOptions& options) {
  checkWritable(outPath);
  fs::path out(outPath);
  std::string weightsName = out.stem().string() + ".weights.bin";
  progress(options, "generating C++");
  GeneratedModel g = generateModel(model, options, weightsName);
  writeFile(out, g.source);
  writeFile(out.parent_path() / weightsName, g.weights);
  writeFile(out.parent_path() / "tessel_model_abi.h", abiHeader());
  return g.report;
}

CompileReport compileSharedLibrary(const Model& model, const std::string& outPath, const CompileOptions& options) {
  checkWritable(outPath);
  checkCompiler(options);
  progress(options, "generating C++");
  GeneratedModel g = generateModel(model, options);
  fs::path runtimeLib = ensureRuntimeLibrary(options);
  fs::path work = fs::temp_directory_path() / fmt::format("tessel-compile-{}-{}", getpid(), g.report.hash);
  fs::create_directories(work);
  writeFile(work / "model.cpp", g.source);
  writeFile(work / "model.weights.bin", g.weights);
  writeFile(work / "tessel_model_abi.h", abiHeader());
  // The library is linked inside the work directory, so a failure of the C++ compiler is about the generated
  // code and a failure to place the result is about outPath.
  fs::path linked = work / "model.so";
  const std::string prelude = precompiledIncludes(options);
  std::string cmd = fmt::format("cd {} && {} {} {} -I{} -I. -Wa,-I{} -shared -o {} model.cpp {} -pthread "
                                "-Wl,--exclude-libs,ALL",
                                shellQuote(work.string()), shellQuote(compilerOf(options)), cxxFlags(options), prelude,
                                shellQuote((runtimeDir() / "include").string()), shellQuote(work.string()),
                                shellQuote(linked.string()), shellQuote(runtimeLib.string()));
  progress(options, fmt::format("compiling {} kernel calls with {}", g.report.steps, compilerOf(options)));
  auto start = std::chrono::steady_clock::now();
  std::string out;
  int rc = runCommand(cmd, out, options, "C++ compiler");
  g.report.cxxSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rc != 0)
    throw UserError(fmt::format("the C++ compiler failed on the generated code (kept in {}):\n{}", work.string(),
                                tail(out)));
  std::error_code ec;
  try {
    placeFile(linked, outPath);
  } catch (const UserError&) {
    fs::remove_all(work, ec);
    throw;
  }
  fs::remove_all(work, ec);
  return g.report;
}

}  // namespace tessel::cpu
