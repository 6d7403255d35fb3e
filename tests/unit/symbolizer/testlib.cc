#include "testlib.h"

#include "test_backtrace.h"

namespace cdsa_symtest {

namespace {
__attribute__((always_inline)) inline int inner_capture(uintptr_t* out, int max, int* line) {
  int n = cdsa_test_backtrace(out, max); *line = __LINE__;
  return n;
}
}  // namespace

__attribute__((noinline)) int lib_capture(uintptr_t* out, int max, int* line) {
  int n = cdsa_test_backtrace(out, max); *line = __LINE__;
  return n;
}

__attribute__((noinline)) int lib_capture_inlined(uintptr_t* out, int max, int* lines) {
  int n = inner_capture(out, max, &lines[0]); lines[1] = __LINE__;
  return n;
}

}  // namespace cdsa_symtest
