/* Layout facts computed from a CPython installation's own headers (compiled
   with -DPy_BUILD_CORE, one object per installation), compared by
   offsets_test.cc with the tables in shim/stacks/python_layout.cc. Plain C. */
#ifndef CDSA_TESTS_PYSTACK_HEADER_LAYOUT_H
#define CDSA_TESTS_PYSTACK_HEADER_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#include "shim/stacks/python_layout_fields.h"
#ifdef __cplusplus
extern "C" {
#endif

/* X(name): every field of cdsa::pystack::PyLayout except minor/state_auto/
   code_tag_mask, same names. */
#define CDSA_HDR_LAYOUT_FIELDS(X)                                          \
  X(tstate_frame) X(frame_lasti) X(code_code)                              \
  X(tstate_cframe) X(cframe_current_frame) X(tstate_current_frame)         \
  X(frame_code) X(frame_previous) X(frame_instr) X(frame_owner)            \
  X(owner_generator) X(owner_skip_min)                                     \
  X(code_filename) X(code_name) X(code_qualname) X(code_linetable)         \
  X(code_firstlineno) X(code_firsttraceable) X(code_adaptive)              \
  X(code_basicsize) X(ob_type) X(ob_size) X(type_flags) X(type_dealloc)    \
  X(str_length) X(str_state) X(str_ascii_size) X(str_compact_size)         \
  X(str_data_any) X(str_basicsize) X(state_kind_shift)                     \
  X(state_compact_shift) X(state_ascii_shift) X(state_ready_shift)

#define CDSA_HDR_DECL(name) int64_t name;
#define CDSA_HDR_DEBUG_DECL(field, member, ...) int64_t field;
struct cdsa_header_layout {
  int64_t hexversion;     /* PY_VERSION_HEX of the headers */
  CDSA_HDR_LAYOUT_FIELDS(CDSA_HDR_DECL)
  int has_debug_offsets;  /* 3.13+: the fields below are filled */
  /* positions inside _Py_DebugOffsets of the fields of shim/stacks/python_layout_fields.h */
  struct { CDSA_PY_DEBUG_OFFSETS_FIELDS(CDSA_HDR_DEBUG_DECL, CDSA_HDR_DEBUG_DECL, CDSA_HDR_DEBUG_DECL) } dbg;
  /* A _Py_DebugOffsets as the runtime initialiser fills it (only the fields
     the walker reads; the rest zero), 3.13+ only. */
  unsigned char debug_offsets[4096];
  size_t debug_offsets_size;
};
#undef CDSA_HDR_DECL
#undef CDSA_HDR_DEBUG_DECL

#ifdef __cplusplus
}
#endif
#endif
