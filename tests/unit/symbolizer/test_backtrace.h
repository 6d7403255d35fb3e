// Test helper: a stack walk with the semantics of glibc backtrace() (entry 0
// is the return address inside the caller), implemented with libgcc's
// _Unwind_Backtrace so that sanitizer interceptors of backtrace() do not add
// their own frames. Internal linkage: each test TU/library gets its own copy.
#pragma once

#include <unwind.h>

#include <cstdint>

namespace {

struct CdsaTestUnwindState {
  uintptr_t* out;
  int max;
  int n;
  int skip;
};

_Unwind_Reason_Code cdsa_test_unwind_cb(struct _Unwind_Context* ctx, void* arg) {
  auto* st = static_cast<CdsaTestUnwindState*>(arg);
  if (st->skip > 0) {  // this helper's own frame
    --st->skip;
    return _URC_NO_REASON;
  }
  if (st->n >= st->max) return _URC_END_OF_STACK;
  const uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  st->out[st->n++] = ip;
  return _URC_NO_REASON;
}

__attribute__((noinline, unused)) int cdsa_test_backtrace(uintptr_t* out, int max) {
  CdsaTestUnwindState st{out, max, 0, 1};
  _Unwind_Backtrace(cdsa_test_unwind_cb, &st);
  return st.n;
}

}  // namespace
