// Per-version CPython layouts for the frame walker (python_stack.cc): where the walker finds the current frame,
// the frame chain, the code object and its strings, for each supported CPython.
//
//   3.10, 3.11, 3.12: hard-coded tables (builtin_layout), checked against each installed CPython's own headers by
//                     tests/unit/python_stack (offsets test).
//   3.13, 3.14:       read at run time from _PyRuntime.debug_offsets through mirrors of that version's
//                     _Py_DebugOffsets (layout_from_debug_offsets), plus the few constants it does not publish.
// These change with every CPython release; the walker does not. Pure data and pure functions: no dlsym, no
// interpreter access, thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/stacks/python_layout_fields.h"

namespace cdsa {
namespace pystack {

// Every offset is in bytes, -1 when the field does not exist in that version.
struct PyLayout {
  int minor = 0;  // 10, 11, 12, 13, 14
  // 3.10 only: the frames are PyFrameObjects (tstate->frame, f_back, f_code, f_lasti); every other field of
  // this group stays -1 in 3.11+.
  int32_t tstate_frame = -1;  // 3.10: PyThreadState.frame
  int32_t frame_lasti = -1;   // 3.10: PyFrameObject.f_lasti (int, in code units; -1 before the first instruction)
  int32_t code_code = -1;     // 3.10: PyCodeObject.co_code (bytes object holding the bytecode)
  // PyThreadState -> current _PyInterpreterFrame
  int32_t tstate_cframe = -1;         // 3.11/3.12: PyThreadState.cframe
  int32_t cframe_current_frame = -1;  // 3.11/3.12: _PyCFrame.current_frame
  int32_t tstate_current_frame = -1;  // 3.13+:     PyThreadState.current_frame
  // _PyInterpreterFrame
  int32_t frame_code = -1;      // f_code (3.10-3.12) / f_executable (3.13+)
  int32_t frame_previous = -1;  // previous (3.11+) / f_back (3.10)
  int32_t frame_instr = -1;     // prev_instr (3.11/3.12) / instr_ptr (3.13+)
  int32_t frame_owner = -1;     // char
  uint64_t code_tag_mask = 0;   // bits to clear from f_executable (_PyStackRef in 3.14)
  int32_t owner_generator = 1;  // FRAME_OWNED_BY_GENERATOR (-1 in 3.10: no owner)
  int32_t owner_skip_min = 3;   // frames with owner >= this are never shown (-1 in 3.10)
                                // (CSTACK in 3.12/3.13, INTERPRETER/CSTACK in 3.14)
  // PyCodeObject
  int32_t code_filename = -1;
  int32_t code_name = -1;
  int32_t code_qualname = -1;  // co_qualname (3.11+) / co_name (3.10 has no co_qualname)
  int32_t code_linetable = -1;
  int32_t code_firstlineno = -1;     // int
  int32_t code_firsttraceable = -1;  // int, in code units
  int32_t code_adaptive = -1;        // co_code_adaptive (bytecode start)
  int32_t code_basicsize = -1;       // sizeof(PyCodeObject) (== tp_basicsize)
  // PyObject / PyVarObject
  int32_t ob_type = -1;
  int32_t ob_size = -1;     // PyVarObject.ob_size (3.11+ code: # code units; 3.10 co_code: # bytes)
  int32_t type_flags = -1;  // PyTypeObject.tp_flags
  int32_t type_dealloc = -1;  // PyTypeObject.tp_dealloc (the walker counts code-object frees through it)
  // str
  int32_t str_length = -1;
  int32_t str_state = -1;            // 32-bit state word
  int32_t str_ascii_size = -1;       // sizeof(PyASCIIObject): compact ASCII data
  int32_t str_compact_size = -1;     // sizeof(PyCompactUnicodeObject): compact data
  int32_t str_data_any = -1;         // PyUnicodeObject.data.any (non-compact)
  int32_t str_basicsize = -1;        // sizeof(PyUnicodeObject) (== tp_basicsize)
  int32_t state_kind_shift = -1;     // kind:3
  int32_t state_compact_shift = -1;  // compact:1
  int32_t state_ascii_shift = -1;    // ascii:1
  int32_t state_ready_shift = -1;    // ready:1 (3.10, 3.11)
  bool state_auto = false;           // 3.14: pick between the two known state
                                     // encodings per string (see .cc)
};

// The hard-coded layouts of 3.10, 3.11 and 3.12. False for other minors.
bool builtin_layout(int minor, PyLayout* out) noexcept;

// Builds the layout of 3.13 / 3.14 from a copy of _PyRuntime.debug_offsets
// (the _Py_DebugOffsets struct of that version). On failure returns false and
// sets *why to a static message.
bool layout_from_debug_offsets(int minor, const void* debug_offsets, size_t available, PyLayout* out,
                               const char** why) noexcept;

// Byte positions, inside that version's _Py_DebugOffsets, of the fields the walker reads (python_layout_fields.h),
// for the offsets test. False for minors without one.
struct DebugOffsetsFields {
#define CDSA_PY_DEBUG_OFFSETS_POSITION(field, member, ...) int32_t field;
  CDSA_PY_DEBUG_OFFSETS_FIELDS(CDSA_PY_DEBUG_OFFSETS_POSITION, CDSA_PY_DEBUG_OFFSETS_POSITION,
                               CDSA_PY_DEBUG_OFFSETS_POSITION)
#undef CDSA_PY_DEBUG_OFFSETS_POSITION
  int32_t end;  // bytes needed to read all of the above
};
bool debug_offsets_fields(int minor, DebugOffsetsFields* out) noexcept;

}  // namespace pystack
}  // namespace cdsa
