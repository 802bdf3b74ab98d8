// C++ exceptions to Python exceptions, and notes to Python warnings.
#include "errors.h"

#include <new>
#include <stdexcept>

#include "tessel/support/error.h"

namespace tessel::python {
namespace {

PyObject* userErrorType = nullptr;
PyObject* internalErrorType = nullptr;
PyObject* noteType = nullptr;

/// A new exception class tessel.NAME deriving from `base`, added to `m` (the objects live as long as the process).
PyObject* newExceptionType(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("tessel.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

}  // namespace

void registerErrors(py::module_& m) {
  userErrorType = newExceptionType(
      m, "UserError", PyExc_ValueError,
      "A problem with what was given: a corrupt or unsupported model, an unknown input name, an input of the wrong "
      "element type or shape, a bad option. The message is the one the tessel CLI prints (exit status 2).");
  internalErrorType = newExceptionType(
      m, "InternalError", PyExc_RuntimeError,
      "A bug in Tessel (a broken invariant); the CLI exits 1 for it. Please report it with the model.");
  noteType = newExceptionType(
      m, "Note", PyExc_UserWarning,
      "A warning for what Tessel assumed, e.g. an undefined input dimension fixed to 1 (the CLI's 'note:' lines).");
  // Module-local (other pybind11 modules in the process, such as torch's, keep their own translation); tried before
  // pybind11's own translator, which handles what is rethrown here.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UserError& e) {
      PyErr_SetString(userErrorType, e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internalErrorType, e.what());
    } catch (const py::builtin_exception&) {  // cast_error included: pybind11 translates them
      throw;
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(internalErrorType, e.what());
    }
  });
}

void warnNotes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes)
    if (PyErr_WarnEx(noteType, n.c_str(), 1) != 0) throw py::error_already_set();
}

}  // namespace tessel::python
