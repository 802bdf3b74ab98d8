// Python arguments to Tessel's options: paths, hardware configurations, thread counts, JSON reports as dicts.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <pybind11/pybind11.h>
#include <string>

#include "tessel/hw/hardware_config.h"

namespace tessel::python {

namespace py = pybind11;

/// A str or os.PathLike as a path (TypeError otherwise); `what` names the argument.
std::string pathOf(py::handle value, const char* what);

/// The hardware configuration `hw` names: None (the configuration "default"), a configuration name ("tiny"), a
/// JSON file, or a dict with the file's content (docs/hardware-config.md). UserError as the CLI's --hw.
hw::HardwareConfig hardwareConfigOf(py::handle hw);

/// A thread count: None (0, all cores) or a whole number from 1 to 256; UserError otherwise.
int threadsOf(py::handle threads);

/// A JSON report as Python objects (dicts, lists, numbers, strings, None).
py::object pythonOf(const nlohmann::json& j);

}  // namespace tessel::python
