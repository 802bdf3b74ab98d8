// Python arguments to Tessel's options.
#include "options.h"

#include <fmt/format.h>

#include "tessel/eval/runner.h"

namespace tessel::python {
namespace {

/// The largest thread count a compiled model may be given (as `tessel compile --threads`).
constexpr long kMaxThreads = 256;

std::string typeName(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>();
}

}  // namespace

std::string pathOf(py::handle value, const char* what) {
  if (!py::isinstance<py::str>(value) && !py::hasattr(value, "__fspath__"))
    throw py::type_error(fmt::format("{}: expected a path (str or os.PathLike), got {}", what, typeName(value)));
  py::object path = py::module_::import("os").attr("fspath")(value);
  if (!py::isinstance<py::str>(path))
    throw py::type_error(fmt::format("{}: expected a str path, got {}", what, typeName(path)));
  return path.cast<std::string>();
}

hw::HardwareConfig hardwareConfigOf(py::handle hw) {
  if (hw.is_none()) return hw::HardwareConfig::load(eval::findHardwareConfig("default"));
  if (py::isinstance<py::dict>(hw)) {
    std::string text = py::module_::import("json").attr("dumps")(hw).cast<std::string>();
    return hw::HardwareConfig::fromJson(nlohmann::json::parse(text), "hw (a dict)");
  }
  return hw::HardwareConfig::load(eval::findHardwareConfig(pathOf(hw, "hw")));
}

int threadsOf(py::handle threads) {
  if (threads.is_none()) return 0;
  if (!py::isinstance<py::int_>(threads) || py::isinstance<py::bool_>(threads))
    throw UserError(fmt::format("threads={}: expected a whole number from 1 to {}, or None for all cores",
                                py::repr(threads).cast<std::string>(), kMaxThreads));
  if (threads < py::int_(1) || threads > py::int_(kMaxThreads))
    throw UserError(fmt::format("threads={}: expected a whole number from 1 to {}, or None for all cores",
                                py::repr(threads).cast<std::string>(), kMaxThreads));
  return threads.cast<int>();
}

py::object pythonOf(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

}  // namespace tessel::python
