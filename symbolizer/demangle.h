// cdsa symbolizer: C++ symbol demangling, base/demangle.h's (one rule for the symbolizer's frames and
// attribution's kernel names).
#pragma once

#include "base/demangle.h"

namespace cdsa::symbolizer {

using base::demangle;

}  // namespace cdsa::symbolizer
