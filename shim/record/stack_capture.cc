// A launch's stack: both walkers (shim/stacks/) captured through their verified caches, then interned in the stack
// table, or its id taken from the memo the caches keep with both halves (recorder.h, capture_and_intern_stack).
// The one file of shim/record/ that drives the walkers: the tables include none.
#include <dlfcn.h>

#include "shim/common/config.h"
#include "shim/common/log.h"
#include "shim/record/stack_table_internal.h"
#include "shim/stacks/native_stack.h"
#include "shim/stacks/python_stack.h"

namespace cdsa {
using namespace recorder_internal;

namespace recorder_internal {
void stack_capture_init() {
  const Config& c = config();
  native_stack_init();
  PyWalkerState py = python_walker_init();
  if (py == PyWalkerState::Unsupported) log_line("%s: launches keep their native frames", python_walker_description());
  // Native stacks of launches made from Python stop at the innermost interpreter frame (CDSA_NATIVE_FULL=1 keeps
  // them whole): the interpreter is the object holding its evaluation loop, libpython or the executable.
  if (py == PyWalkerState::Ready && !c.native_full) {
    const char* names[] = {"_PyEval_EvalFrameDefault", "PyEval_EvalCode", "Py_Version"};
    for (const char* name : names)
      if (set_interpreter_range_from(dlsym(RTLD_DEFAULT, name))) break;
  }
}
}  // namespace recorder_internal

// The Python side of a memo when the launch has no Python frames (no Python, or depth 0): a fixed token.
constexpr uint64_t kNoPythonToken = ~uint64_t{0};

uint32_t capture_and_intern_stack() noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return kUnknownStack;
  const Config& c = config();
  if (c.native_depth <= 0 && c.python_depth <= 0) return kUnknownStack;  // no stacks: nothing to capture
  uintptr_t pcs[256];
  PyFrameKey py[256];
  PyCapture pyhow;
  pyhow.borrow = true;
  pyhow.frames = py;
  int n_py = c.python_depth > 0 ? capture_python_frames_cached(py, c.python_depth, &pyhow) : 0;
  NativeCapture how;
  how.stop_at_interpreter = n_py > 0 && !c.native_full;
  how.borrow = true;
  int n_native = capture_native_stack(pcs, c.native_depth, &how);
  if (n_native == 0 && n_py == 0) return kUnknownStack;
  // Both halves served from their verified caches: each carries the memo of the id this thread last interned it
  // with, and the token of the other half it was interned with (a token names one fill of one cache entry: the
  // same tokens, the same frames, the same id while it lives; no hash, no compare). The memo says whether it does.
  const uint64_t py_token = n_py == 0 ? kNoPythonToken : pyhow.token;
  if (how.token && py_token) {
    if (n_py > 0 && pyhow.memo->other == how.token) {
      const uint32_t id = memo_id_now(&pyhow.memo->stack);
      if (id != kUnknownStack) return id;
    }
    if (how.memo->other == py_token) {
      const uint32_t id = memo_id_now(&how.memo->stack);
      if (id != kUnknownStack) return id;
    }
  }
  uint32_t id = intern_stack(how.frames, n_native, pyhow.frames, n_py, resolve_python_frame);
  if (how.token && py_token && id != kUnknownStack) {
    const StackMemo m = stack_memo(id);
    *how.memo = NativeMemo{py_token, m};
    if (n_py > 0) *pyhow.memo = PyMemo{how.token, m};
  }
  return id;
}

}  // namespace cdsa
