// One interleaved Python/native "most recent call last" stack, the way py-spy --native and
// memray's hybrid stacks show it, built from the raw frames a launch recorded (CallStack).
//
// Merge rules (the one place they are written down):
//   1. Frames of cdsa itself (module libcdsa*.so) never appear.
//   2. Anchors. Each native frame running _PyEval_EvalFrameDefault (or its .cold part) is one
//      interpreter activation; it ran one or more Python frames (3.11+ runs Python-to-Python
//      calls inside one activation). When no native frame carries that name (stripped
//      interpreter), each maximal run of frames inside the interpreter's own module
//      (python3.X / libpython3.X.so) is one anchor instead.
//   3. Pairing is from the innermost end: the innermost Python frame belongs to the innermost
//      anchor (both lists are innermost first, and depth limits cut both at the outer end).
//      It succeeds when there is at least one anchor, no more anchors than Python frames, and
//      the split of the Python frames over the anchors is known or cannot show:
//        - named anchors and as many anchors as Python frames: one each;
//        - one anchor: all Python frames are its;
//        - otherwise every native frame between the innermost and the outermost anchor is
//          interpreter/call machinery (rule 4), so, folded, the split is invisible: the
//          outer anchors take one Python frame each and the innermost anchor the rest.
//      With --native-all those machinery frames are shown, so that last case does not pair.
//   3a. No anchor, but the native stack does not end at a process or thread start (_start,
//      __libc_start_*, start_thread, clone): the depth limit cut it before the interpreter, so
//      every native frame it holds ran below the innermost Python frame; Python frames first.
//   4. Folding (default): frames of the interpreter's module, libffi, ctypes' _ctypes module,
//      process and thread start (_start, __libc_start_*, start_thread, [__]clone[3]), and, in any
//      module, names of CPython's call machinery (_PyEval_*, PyEval_*, *Vectorcall*,
//      _PyObject_*Call*, PyObject_Call*, cfunction_call, slot_tp_*, _PyFunction_*, Py_RunMain,
//      Py_BytesMain, pymain_*, _PyRun_*, PyRun_*, run_mod, run_eval_code_obj, ffi_call*,
//      _ctypes_callproc, PyCFuncPtr_call). Everything else, notably the innermost part from
//      the last Python frame to the launch (binding, op, kernel template, cudart), is shown.
//   5. When pairing fails, the view falls back to the two lists (Python frames, then the
//      native frames, folded the same way) and says so. A stack without Python frames is its
//      native list, unfolded, as recorded (a thread the interpreter never ran: autograd engine,
//      C++ program; or an interpreter whose frames cannot be read: there its frames are all
//      that says where the launch came from).
//   6. Notebook cells (a Python frame whose file is "Cell In[N]", as cdsa names the cells of a Jupyter
//      kernel): everything older than the outermost cell frame (runpy, traitlets, tornado, asyncio,
//      ipykernel, IPython's run_cell chain, and the native frames under them) is folded into one line,
//      by position; --native-all shows it.
//
// Contract: pure functions over values; no I/O, no globals; allocate. The entries point into
// the CallStack passed in, which must outlive them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "report/fault_report.h"

namespace cdsa::report {

enum class FrameRole { Cdsa, Eval, Machinery, Shown };

// What rule 1/2/4 make of one native frame (Eval frames are also folded).
FrameRole native_frame_role(const ResolvedFrame& f);
// The frame lies in the interpreter's own module (python3.X executable or libpython3.X.so).
bool in_interpreter_module(const ResolvedFrame& f);

struct HybridEntry {
  const PyFrame* python = nullptr;  // exactly one of the two is set
  const ResolvedFrame* native = nullptr;
};

struct HybridStack {
  bool merged = false;               // false: `entries` is the Python list, then the native list
  std::vector<HybridEntry> entries;  // outermost first ("most recent call last")
  size_t python_count = 0;           // in the fallback: the first python_count entries are Python
  size_t folded = 0;                 // native frames left out by folding (rule 4)
  size_t folded_kernel = 0;          // frames older than the outermost notebook cell, left out (rule 6)
};

HybridStack build_hybrid_stack(const CallStack& st, bool native_all);
// Rules 1-5 only (no notebook folding).
HybridStack build_hybrid_stack_unfolded(const CallStack& st, bool native_all);

}  // namespace cdsa::report
