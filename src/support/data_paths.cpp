// Finds Tessel's data files: in the installed prefix of the running binary (or of the shared object holding this
// code, e.g. the Python module), else in the source tree.
#include "tessel/support/data_paths.h"

#include <dlfcn.h>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace fs = std::filesystem;

namespace tessel {
namespace {

/// The prefix P of an installed binary P/bin/tessel (or of a test binary next to it).
fs::path executablePrefix() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path().parent_path();
}

bool hasRuntime(const fs::path& share) {
  std::error_code ec;
  return fs::is_directory(share / "runtime" / "include" / "tessel" / "rt", ec);
}

DataPaths fromShare(const fs::path& share, const fs::path& includeDir) {
  DataPaths p;
  p.runtimeDir = (share / "runtime").string();
  p.abiHeader = (includeDir / "tessel" / "targets" / "cpu" / "abi.h").string();
  p.configsDir = (share / "configs").string();
  p.plotScript = (share / "scripts" / "tessel_plot.py").string();
  p.installed = true;
  return p;
}

/// The prefix P of an installed shared object holding this code (the Python module, P/lib/python3.X/
/// site-packages/tessel/_tessel*.so): the nearest ancestor of its directory with Tessel's data in share/tessel.
fs::path sharedObjectPrefix() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&sharedObjectPrefix), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  fs::path object = fs::canonical(info.dli_fname, ec);
  if (ec) return {};
  for (fs::path dir = object.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
    if (hasRuntime(dir / "share" / "tessel")) return dir;
  return {};
}

DataPaths findDataPaths() {
  for (const fs::path& prefix : {executablePrefix(), sharedObjectPrefix()})
    if (!prefix.empty() && hasRuntime(prefix / "share" / "tessel")) return fromShare(prefix / "share" / "tessel", prefix / "include");
  const fs::path src = TESSEL_SOURCE_DIR;
  DataPaths p;
  p.runtimeDir = (src / "runtime").string();
  p.abiHeader = (src / "include" / "tessel" / "targets" / "cpu" / "abi.h").string();
  p.configsDir = (src / "configs").string();
  p.plotScript = (src / "tools" / "tessel" / "tessel_plot.py").string();
  return p;
}

}  // namespace

const DataPaths& dataPaths() {
  static const DataPaths paths = findDataPaths();
  return paths;
}

}  // namespace tessel
