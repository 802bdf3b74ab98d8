// tessel.compare: two forms of a model run on the same inputs and compared as `tessel compare` compares them.
#pragma once

#include <pybind11/pybind11.h>

namespace tessel::python {

/// Registers tessel.compare.
void registerCompare(pybind11::module_& m);

}  // namespace tessel::python
