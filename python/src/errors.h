// Tessel's two error channels as Python exceptions (tessel.UserError, a ValueError; tessel.InternalError, a
// RuntimeError) and its notes as Python warnings (tessel.Note).
#pragma once

#include <pybind11/pybind11.h>
#include <string>
#include <vector>

namespace tessel::python {

namespace py = pybind11;

/// Creates tessel.UserError, tessel.InternalError and tessel.Note in `m` and translates C++ exceptions: UserError
/// and InternalError to their Python counterparts, std::bad_alloc to MemoryError, any other std::exception to
/// InternalError (as the CLI exits 1 for them); pybind11's own exceptions keep their Python types.
void registerErrors(py::module_& m);

/// Issues each note (what Tessel assumed for the user, printed as "note: ..." by the CLI) as a tessel.Note warning.
/// Needs the GIL; raises when a warnings filter turns notes into errors.
void warnNotes(const std::vector<std::string>& notes);

}  // namespace tessel::python
