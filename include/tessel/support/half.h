// IEEE half (float16) and bfloat16 storage types: the runtime's (generated code converts with the same).
#pragma once

#include "tessel/rt/half.h"
