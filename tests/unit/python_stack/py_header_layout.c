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
#  define DPOS(dst, member) L->dbg.dst = offsetof(_Py_DebugOffsets, member)
  DPOS(version, version);
  DPOS(free_threaded, free_threaded);
  DPOS(tstate_current_frame, thread_state.current_frame);
  DPOS(frame_previous, interpreter_frame.previous);
  DPOS(frame_executable, interpreter_frame.executable);
  DPOS(frame_instr_ptr, interpreter_frame.instr_ptr);
  DPOS(frame_owner, interpreter_frame.owner);
  DPOS(code_size, code_object.size);
  DPOS(code_filename, code_object.filename);
  DPOS(code_name, code_object.name);
  DPOS(code_qualname, code_object.qualname);
  DPOS(code_linetable, code_object.linetable);
  DPOS(code_firstlineno, code_object.firstlineno);
  DPOS(code_adaptive, code_object.co_code_adaptive);
  DPOS(pyobject_size, pyobject.size);
  DPOS(pyobject_ob_type, pyobject.ob_type);
  DPOS(unicode_size, unicode_object.size);
  DPOS(unicode_state, unicode_object.state);
  DPOS(unicode_length, unicode_object.length);
  DPOS(unicode_ascii_size, unicode_object.asciiobject_size);
#  undef DPOS
  {
    /* Same expressions as _PyRuntimeState_INIT's .debug_offsets initialiser. */
    _Py_DebugOffsets d;
    memset(&d, 0, sizeof d);
    memcpy(d.cookie, "xdebugpy", 8);
    d.version = PY_VERSION_HEX;
    d.free_threaded = 0;
    d.thread_state.size = sizeof(PyThreadState);
    d.thread_state.current_frame = offsetof(PyThreadState, current_frame);
    d.interpreter_frame.size = sizeof(_PyInterpreterFrame);
    d.interpreter_frame.previous = offsetof(_PyInterpreterFrame, previous);
    d.interpreter_frame.executable = offsetof(_PyInterpreterFrame, f_executable);
    d.interpreter_frame.instr_ptr = offsetof(_PyInterpreterFrame, instr_ptr);
    d.interpreter_frame.owner = offsetof(_PyInterpreterFrame, owner);
    d.code_object.size = sizeof(PyCodeObject);
    d.code_object.filename = offsetof(PyCodeObject, co_filename);
    d.code_object.name = offsetof(PyCodeObject, co_name);
    d.code_object.qualname = offsetof(PyCodeObject, co_qualname);
    d.code_object.linetable = offsetof(PyCodeObject, co_linetable);
    d.code_object.firstlineno = offsetof(PyCodeObject, co_firstlineno);
    d.code_object.co_code_adaptive = offsetof(PyCodeObject, co_code_adaptive);
    d.pyobject.size = sizeof(PyObject);
    d.pyobject.ob_type = offsetof(PyObject, ob_type);
    d.type_object.size = sizeof(PyTypeObject);
    d.type_object.tp_flags = offsetof(PyTypeObject, tp_flags);
    d.unicode_object.size = sizeof(PyUnicodeObject);
    d.unicode_object.state = offsetof(PyUnicodeObject, _base._base.state);
    d.unicode_object.length = offsetof(PyUnicodeObject, _base._base.length);
    d.unicode_object.asciiobject_size = sizeof(PyASCIIObject);
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
