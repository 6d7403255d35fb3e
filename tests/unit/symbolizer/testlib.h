// Test-only shared library for the symbolizer unit tests (built -g -O0).
#pragma once

#include <cstdint>

namespace cdsa_symtest {

// backtrace() from inside this (exported, noinline) function. *line is the
// source line of the backtrace() call.
__attribute__((visibility("default"))) int lib_capture(uintptr_t* out, int max, int* line);

// backtrace() from an always_inline helper inlined into this function.
// lines[0]: line of the backtrace() call in the helper; lines[1]: line of the
// helper's call site in lib_capture_inlined.
__attribute__((visibility("default"))) int lib_capture_inlined(uintptr_t* out, int max, int* lines);

}  // namespace cdsa_symtest
