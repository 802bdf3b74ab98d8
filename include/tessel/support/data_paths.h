// Where Tessel finds the files it needs at run time (runtime sources, the model ABI header, hardware
// configurations, the plotting script): in an installed prefix or, for a build tree, in the source tree.
#pragma once

#include <string>

namespace tessel {

/// The data files of this Tessel. Installed (`cmake --install build --prefix P`): P/share/tessel/... and
/// P/include; otherwise the source tree the binary was built from.
struct DataPaths {
  std::string runtimeDir;   ///< runtime/ (include/, src/, tools/) compiled into every model
  std::string abiHeader;    ///< tessel/targets/cpu/abi.h, copied next to generated code
  std::string configsDir;   ///< hardware configurations (default.json, tiny.json, ...)
  std::string plotScript;   ///< tessel_plot.py (matplotlib charts of bench/sim data)
  bool installed = false;   ///< found in an installed prefix
};

/// The paths, found once (the first call looks in the prefix of the running executable, then of the shared object
/// holding this code, e.g. the installed Python module).
const DataPaths& dataPaths();

}  // namespace tessel
