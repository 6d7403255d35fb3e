/* The fields of CPython's _Py_DebugOffsets (3.13+) that the frame walker reads, in one table for the shim
   (shim/stacks/python_layout.cc: their positions in its mirrors, DebugOffsetsFields) and for the offsets test
   (tests/unit/python_stack/py_header_layout.c: the same positions, and the values, from a real CPython's headers).
   Plain preprocessor, so C and C++ include it alike.

   CDSA_PY_DEBUG_OFFSETS_FIELDS(H, S, O) lists them all, in three kinds by what CPython's runtime initialiser
   (_PyRuntimeState_INIT in 3.13, _Py_DebugOffsets_INIT in 3.14) stores there:
     H(field, member, value)                    the header: `value`;
     S(field, member, type)                     a size: sizeof(type);
     O(field, member, type, cpython_member)     an offset: offsetof(type, cpython_member);
   where `field` names the position in cdsa::pystack::DebugOffsetsFields and `member` is the member of
   _Py_DebugOffsets. (CPython writes the str fields as offsetof(PyUnicodeObject, _base._base.state): the same
   value, as every str object begins with its PyASCIIObject.) The shim never expands value, type or cpython_member: they
   are CPython's own names, which the offsets test compiles against each installed CPython. */
#ifndef CDSA_SHIM_PYTHON_LAYOUT_FIELDS_H
#define CDSA_SHIM_PYTHON_LAYOUT_FIELDS_H

#define CDSA_PY_DEBUG_OFFSETS_FIELDS(H, S, O) CDSA_PY_DEBUG_HEADER(H) CDSA_PY_DEBUG_SIZES(S) CDSA_PY_DEBUG_OFFSETS(O)

#define CDSA_PY_DEBUG_HEADER(H)       \
  H(version, version, PY_VERSION_HEX) \
  H(free_threaded, free_threaded, _Py_Debug_Free_Threaded)

#define CDSA_PY_DEBUG_SIZES(S)                               \
  S(tstate_size, thread_state.size, PyThreadState)           \
  S(frame_size, interpreter_frame.size, _PyInterpreterFrame) \
  S(code_size, code_object.size, PyCodeObject)               \
  S(pyobject_size, pyobject.size, PyObject)                  \
  S(type_size, type_object.size, PyTypeObject)               \
  S(unicode_size, unicode_object.size, PyUnicodeObject)      \
  S(unicode_ascii_size, unicode_object.asciiobject_size, PyASCIIObject)

#define CDSA_PY_DEBUG_OFFSETS(O)                                                       \
  O(tstate_current_frame, thread_state.current_frame, PyThreadState, current_frame)    \
  O(frame_previous, interpreter_frame.previous, _PyInterpreterFrame, previous)         \
  O(frame_executable, interpreter_frame.executable, _PyInterpreterFrame, f_executable) \
  O(frame_instr_ptr, interpreter_frame.instr_ptr, _PyInterpreterFrame, instr_ptr)      \
  O(frame_owner, interpreter_frame.owner, _PyInterpreterFrame, owner)                  \
  O(code_filename, code_object.filename, PyCodeObject, co_filename)                    \
  O(code_name, code_object.name, PyCodeObject, co_name)                                \
  O(code_qualname, code_object.qualname, PyCodeObject, co_qualname)                    \
  O(code_linetable, code_object.linetable, PyCodeObject, co_linetable)                 \
  O(code_firstlineno, code_object.firstlineno, PyCodeObject, co_firstlineno)           \
  O(code_adaptive, code_object.co_code_adaptive, PyCodeObject, co_code_adaptive)       \
  O(pyobject_ob_type, pyobject.ob_type, PyObject, ob_type)                             \
  O(type_flags, type_object.tp_flags, PyTypeObject, tp_flags)                          \
  O(unicode_state, unicode_object.state, PyASCIIObject, state)                         \
  O(unicode_length, unicode_object.length, PyASCIIObject, length)

#endif
