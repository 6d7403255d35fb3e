/* Compiled once per CPython installation (include dirs and CDSA_HDR_FN set by
   CMake) with -DPy_BUILD_CORE: fills a cdsa_header_layout with offsetof()
   values taken from that installation's real headers. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030D0000
#  include "internal/pycore_runtime.h"
#endif
#if PY_VERSION_HEX >= 0x030B0000
#  include "internal/pycore_frame.h"
#else
#  include <frameobject.h> /* 3.10: PyFrameObject is the frame */
#endif

#include "header_layout.h"

#ifndef CDSA_HDR_FN
#  error "CDSA_HDR_FN must name the exported function"
#endif

/* Bit position of a one-bit-wide-or-more bitfield: set it to all ones in a
   zeroed state struct and find the lowest set bit of the 32-bit word. */
#define STATE_SHIFT(field, ones)                                    \
  do {                                                              \
    PyASCIIObject o;                                                \
    memset(&o, 0, sizeof o);                                        \
    o.state.field = (ones);                                         \
    uint32_t w;                                                     \
    memcpy(&w, &o.state, sizeof w);                                 \
    int s = 0;                                                      \
    while (s < 32 && !(w & (1u << s))) s++;                         \
    shift = s;                                                      \
  } while (0)

void CDSA_HDR_FN(struct cdsa_header_layout* L) {
  int shift = -1;
  memset(L, 0xff, sizeof *L); /* every int64 field -1 unless set */
  L->hexversion = PY_VERSION_HEX;
#if PY_VERSION_HEX < 0x030B0000
  L->tstate_frame = offsetof(PyThreadState, frame);
  L->frame_previous = offsetof(PyFrameObject, f_back);
  L->frame_code = offsetof(PyFrameObject, f_code);
  L->frame_lasti = offsetof(PyFrameObject, f_lasti);
  L->code_code = offsetof(PyCodeObject, co_code);
  L->code_qualname = offsetof(PyCodeObject, co_name); /* no co_qualname in 3.10 */
  L->code_basicsize = sizeof(PyCodeObject);
#else
#if PY_VERSION_HEX < 0x030D0000
  L->tstate_cframe = offsetof(PyThreadState, cframe);
  L->cframe_current_frame = offsetof(_PyCFrame, current_frame);
  L->frame_code = offsetof(_PyInterpreterFrame, f_code);
  L->frame_instr = offsetof(_PyInterpreterFrame, prev_instr);
#else
  L->tstate_current_frame = offsetof(PyThreadState, current_frame);
  L->frame_code = offsetof(_PyInterpreterFrame, f_executable);
  L->frame_instr = offsetof(_PyInterpreterFrame, instr_ptr);
#endif
  L->frame_previous = offsetof(_PyInterpreterFrame, previous);
  L->frame_owner = offsetof(_PyInterpreterFrame, owner);
  L->owner_generator = FRAME_OWNED_BY_GENERATOR;
#if PY_VERSION_HEX < 0x030C0000
  /* 3.11 has owners 0..2 only; nothing to skip by owner. */
  L->owner_skip_min = FRAME_OWNED_BY_FRAME_OBJECT + 1;
#else
  L->owner_skip_min = FRAME_OWNED_BY_CSTACK;
#endif
  L->code_qualname = offsetof(PyCodeObject, co_qualname);
  L->code_firsttraceable = offsetof(PyCodeObject, _co_firsttraceable);
  L->code_adaptive = offsetof(PyCodeObject, co_code_adaptive);
  L->code_basicsize = sizeof(PyCodeObject);
#endif /* 3.11+ */
  L->code_filename = offsetof(PyCodeObject, co_filename);
  L->code_name = offsetof(PyCodeObject, co_name);
  L->code_linetable = offsetof(PyCodeObject, co_linetable);
  L->code_firstlineno = offsetof(PyCodeObject, co_firstlineno);
  L->ob_type = offsetof(PyObject, ob_type);
  L->ob_size = offsetof(PyVarObject, ob_size);
  L->type_flags = offsetof(PyTypeObject, tp_flags);
  L->type_dealloc = offsetof(PyTypeObject, tp_dealloc);
  L->str_length = offsetof(PyASCIIObject, length);
  L->str_state = offsetof(PyASCIIObject, state);
  L->str_ascii_size = sizeof(PyASCIIObject);
  L->str_compact_size = sizeof(PyCompactUnicodeObject);
  L->str_data_any = offsetof(PyUnicodeObject, data.any);
  L->str_basicsize = sizeof(PyUnicodeObject);
  STATE_SHIFT(kind, 7);
  L->state_kind_shift = shift;
  STATE_SHIFT(compact, 1);
  L->state_compact_shift = shift;
  STATE_SHIFT(ascii, 1);
  L->state_ascii_shift = shift;
#if PY_VERSION_HEX < 0x030C0000
  STATE_SHIFT(ready, 1);
  L->state_ready_shift = shift;
#else
  L->state_ready_shift = -1;
#endif

#if PY_VERSION_HEX >= 0x030D0000
  L->has_debug_offsets = 1;
#  define DPOS(field, member, ...) L->dbg.field = offsetof(_Py_DebugOffsets, member);
  CDSA_PY_DEBUG_OFFSETS_FIELDS(DPOS, DPOS, DPOS)
#  undef DPOS
  {
    /* A _Py_DebugOffsets as the runtime initialiser (_PyRuntimeState_INIT, _Py_DebugOffsets_INIT) fills
       it, for the fields the walker reads (shim/stacks/python_layout_fields.h); the rest zero. */
    _Py_DebugOffsets d;
    memset(&d, 0, sizeof d);
    memcpy(d.cookie, "xdebugpy", 8);
#  define DVALUE(field, member, value) d.member = (value);
#  define DSIZE(field, member, type) d.member = sizeof(type);
#  define DOFFSET(field, member, type, cpython_member) d.member = offsetof(type, cpython_member);
    CDSA_PY_DEBUG_OFFSETS_FIELDS(DVALUE, DSIZE, DOFFSET)
#  undef DVALUE
#  undef DSIZE
#  undef DOFFSET
    _Static_assert(sizeof d <= sizeof L->debug_offsets, "debug offsets too big");
    memset(L->debug_offsets, 0, sizeof L->debug_offsets);
    memcpy(L->debug_offsets, &d, sizeof d);
    L->debug_offsets_size = sizeof d;
  }
#else
  L->has_debug_offsets = 0;
  L->debug_offsets_size = 0;
#endif
}
