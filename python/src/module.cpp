// The native layer of the Python package `tessel` (tessel._tessel): a thin pybind11 binding of libtessel_lib.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arrays.h"
#include "errors.h"
#include "py_compare.h"
#include "py_compiled.h"
#include "py_model.h"
#include "tessel/support/data_paths.h"
#include "tessel/support/error.h"

namespace py = pybind11;

PYBIND11_MODULE(_tessel, m) {
  py::options options;
  options.disable_function_signatures();  // each docstring starts with its own signature line
  m.doc() = "Tessel's C++ library for Python; use the package `tessel`, which re-exports what is public here.";
  m.attr("__version__") = TESSEL_VERSION;
  tessel::python::registerErrors(m);
  tessel::python::registerTensorInfo(m);
  tessel::python::registerModel(m);
  tessel::python::registerCompiled(m);
  tessel::python::registerCompare(m);
  m.def(
      "data_paths",
      [] {
        const tessel::DataPaths& p = tessel::dataPaths();
        py::dict d;
        d["runtime"] = p.runtimeDir;
        d["configs"] = p.configsDir;
        d["plot_script"] = p.plotScript;
        d["installed"] = p.installed;
        return d;
      },
      "data_paths() -> dict\n\nWhere this Tessel reads its data (as `tessel --version` prints it): runtime (the "
      "sources compiled into every CPU model), configs (the hardware configurations by name), plot_script, and "
      "installed (True when found in an installed prefix, False in a build tree).");
  // For the tests of the exception translation: throws what a failing library call would.
  m.def("_raise_for_test", [](const std::string& kind, const std::string& message) {
    if (kind == "user") throw tessel::UserError(message);
    if (kind == "internal") TESSEL_ASSERT(false, message);
    if (kind == "std") throw std::out_of_range(message);
    if (kind == "bad_alloc") throw std::bad_alloc();
    throw py::value_error("kind: user, internal, std or bad_alloc");
  });
}
