// Per-version CPython layouts: see python_layout.h.
#include "python_layout.h"

#include <cstring>

namespace cdsa {
namespace pystack {
namespace {

// ---------------------------------------------------------------------------
// Mirrors of _Py_DebugOffsets (Include/internal/pycore_runtime.h in 3.13,
// Include/internal/pycore_debug_offsets.h in 3.14), x86-64. Only the
// positions matter; unused groups are plain arrays.
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  uint64_t runtime_state[3];
  uint64_t interpreter_state[13];
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
        co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  uint64_t tuple_object[3];
  uint64_t list_object[3];
  uint64_t dict_object[3];
  uint64_t float_object[2];
  uint64_t long_object[3];
  uint64_t bytes_object[3];
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
  uint64_t gc[2];
};

struct DebugOffsets314 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  uint64_t runtime_state[3];
  // size id next threads_head threads_main gc imports_modules sysdict builtins
  // ceval_gil gil_runtime_state gil_runtime_state_{enabled,locked,holder}
  // code_object_generation tlbc_generation
  uint64_t interpreter_state[16];
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner, stackpointer, tlbc_index;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
        co_code_adaptive, co_tlbc;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  uint64_t tuple_object[3];
  uint64_t list_object[3];
  uint64_t set_object[4];
  uint64_t dict_object[3];
  uint64_t float_object[2];
  uint64_t long_object[3];
  uint64_t bytes_object[3];
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
  uint64_t gc[2];
  uint64_t gen_object[4];
  uint64_t llist_node[2];
  uint64_t debugger_support[6];
};

template <class D>
void fill_fields(DebugOffsetsFields* f) {
#define CDSA_POS(dst, member) f->dst = static_cast<int32_t>(offsetof(D, member))
  CDSA_POS(version, version);
  CDSA_POS(free_threaded, free_threaded);
  CDSA_POS(tstate_current_frame, thread_state.current_frame);
  CDSA_POS(frame_previous, interpreter_frame.previous);
  CDSA_POS(frame_executable, interpreter_frame.executable);
  CDSA_POS(frame_instr_ptr, interpreter_frame.instr_ptr);
  CDSA_POS(frame_owner, interpreter_frame.owner);
  CDSA_POS(code_size, code_object.size);
  CDSA_POS(code_filename, code_object.filename);
  CDSA_POS(code_name, code_object.name);
  CDSA_POS(code_qualname, code_object.qualname);
  CDSA_POS(code_linetable, code_object.linetable);
  CDSA_POS(code_firstlineno, code_object.firstlineno);
  CDSA_POS(code_adaptive, code_object.co_code_adaptive);
  CDSA_POS(pyobject_size, pyobject.size);
  CDSA_POS(pyobject_ob_type, pyobject.ob_type);
  CDSA_POS(unicode_size, unicode_object.size);
  CDSA_POS(unicode_state, unicode_object.state);
  CDSA_POS(unicode_length, unicode_object.length);
  CDSA_POS(unicode_ascii_size, unicode_object.asciiobject_size);
#undef CDSA_POS
  f->end = static_cast<int32_t>(sizeof(D));
}

template <class D>
bool build_from(int minor, const D& d, PyLayout* L, const char** why) {
  if (std::memcmp(d.cookie, "xdebugpy", 8) != 0) {
    *why = "_PyRuntime.debug_offsets cookie missing";
    return false;
  }
  if ((d.version >> 24) != 3 || ((d.version >> 16) & 0xff) != uint64_t(minor)) {
    *why = "_PyRuntime.debug_offsets version does not match Py_Version";
    return false;
  }
  if (d.free_threaded != 0) {
    *why = "free-threaded build not supported";
    return false;
  }
  // Plausibility: a shifted mirror (fields added in a patch release) or an
  // unusual build (Py_TRACE_REFS) fails these instead of being trusted.
  const auto& c = d.code_object;
  const auto& u = d.unicode_object;
  const auto& fr = d.interpreter_frame;
  const auto& ts = d.thread_state;
  bool ok = d.pyobject.size == 16 && d.pyobject.ob_type == 8 && c.name == c.filename + 8 && c.qualname == c.name + 8 &&
            c.linetable == c.qualname + 8 && c.filename >= 24 && c.co_code_adaptive > c.linetable &&
            c.size > c.co_code_adaptive && c.size <= c.co_code_adaptive + 16 && c.firstlineno >= 24 &&
            c.firstlineno < c.filename && u.asciiobject_size >= 32 && u.asciiobject_size <= 64 &&
            u.size == u.asciiobject_size + 24 && u.state >= 16 && u.state < u.asciiobject_size && u.length >= 16 &&
            u.length < u.state && fr.size >= 48 && fr.size <= 256 && fr.previous + 8 <= fr.size &&
            fr.executable + 8 <= fr.size && fr.instr_ptr + 8 <= fr.size && fr.owner < fr.size && ts.size <= 65536 &&
            ts.current_frame + 8 <= ts.size && d.type_object.tp_flags > 24 &&
            d.type_object.tp_flags + 8 <= d.type_object.size;
  if (!ok) {
    *why = "_PyRuntime.debug_offsets has an unexpected layout";
    return false;
  }
  *L = PyLayout{};
  L->minor = minor;
  L->tstate_current_frame = int32_t(ts.current_frame);
  L->frame_code = int32_t(fr.executable);
  L->frame_previous = int32_t(fr.previous);
  L->frame_instr = int32_t(fr.instr_ptr);
  L->frame_owner = int32_t(fr.owner);
  L->owner_generator = 1;  // FRAME_OWNED_BY_GENERATOR
  L->owner_skip_min = 3;   // 3.13 CSTACK=3; 3.14 INTERPRETER=3, CSTACK=4
  L->code_filename = int32_t(c.filename);
  L->code_name = int32_t(c.name);
  L->code_qualname = int32_t(c.qualname);
  L->code_linetable = int32_t(c.linetable);
  L->code_firstlineno = int32_t(c.firstlineno);
  // `int _co_firsttraceable; void *co_extra; char co_code_adaptive[]` end the
  // struct in 3.13 and in 3.14 default (non free-threaded) builds.
  L->code_firsttraceable = int32_t(c.co_code_adaptive) - 16;
  L->code_adaptive = int32_t(c.co_code_adaptive);
  L->code_basicsize = int32_t(c.size);
  L->ob_type = int32_t(d.pyobject.ob_type);
  L->ob_size = int32_t(d.pyobject.size);  // PyVarObject = {PyObject; ob_size}
  L->type_flags = int32_t(d.type_object.tp_flags);
  L->str_length = int32_t(u.length);
  L->str_state = int32_t(u.state);
  L->str_ascii_size = int32_t(u.asciiobject_size);
  // PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8;
  // PyUnicodeObject = PyCompactUnicodeObject + data pointer.
  L->str_compact_size = int32_t(u.size) - 8;
  L->str_data_any = int32_t(u.size) - 8;
  L->str_basicsize = int32_t(u.size);
  // state: interned:2 kind:3 compact:1 ascii:1 statically_allocated:1
  L->state_kind_shift = 2;
  L->state_compact_shift = 5;
  L->state_ascii_shift = 6;
  L->state_ready_shift = -1;
  if (minor >= 14) {
    // f_executable is a _PyStackRef: low tag bit(s) mark deferred references.
    L->code_tag_mask = 3;
    // Newer sources store `uint16_t interned` followed by unsigned-short
    // bitfields (kind at bit 16); decode_str_state() tells them apart.
    L->state_auto = true;
  }
  return true;
}

}  // namespace

bool builtin_layout(int minor, PyLayout* out) noexcept {
  PyLayout L;
  L.minor = minor;
  L.owner_generator = 1;  // FRAME_OWNED_BY_GENERATOR
  L.owner_skip_min = 3;   // 3.11: owners are 0..2; 3.12: FRAME_OWNED_BY_CSTACK
  L.ob_type = 8;
  L.ob_size = 16;
  L.type_flags = 168;
  L.str_length = 16;
  L.str_state = 32;
  L.state_kind_shift = 2;
  L.state_compact_shift = 5;
  L.state_ascii_shift = 6;
  L.code_filename = 112;
  L.code_name = 120;
  L.code_qualname = 128;
  L.code_linetable = 136;
  if (minor == 10) {
    L.tstate_frame = 24;    // prev next interp frame
    L.frame_previous = 24;  // PyFrameObject: PyObject_VAR_HEAD f_back f_code
    L.frame_code = 32;
    L.frame_lasti = 96;
    L.owner_generator = -1;  // no frame owners: every frame on the chain is shown
    L.owner_skip_min = -1;
    L.code_firstlineno = 40;
    L.code_code = 48;
    L.code_filename = 104;
    L.code_name = 112;
    L.code_qualname = 112;  // co_name: CPython 3.10 tracebacks print it too
    L.code_linetable = 120;
    L.code_basicsize = 176;
    L.str_ascii_size = 48;  // has wchar_t *wstr
    L.str_compact_size = 72;
    L.str_data_any = 72;
    L.str_basicsize = 80;
    L.state_ready_shift = 7;
  } else if (minor == 11) {
    L.tstate_cframe = 56;
    L.cframe_current_frame = 8;  // after uint8_t use_tracing
    L.frame_code = 32;           // f_func f_globals f_builtins f_locals f_code
    L.frame_previous = 48;
    L.frame_instr = 56;  // prev_instr
    L.frame_owner = 69;
    L.code_firstlineno = 72;
    L.code_firsttraceable = 168;
    L.code_adaptive = 184;
    L.code_basicsize = 192;
    L.str_ascii_size = 48;    // has wchar_t *wstr
    L.str_compact_size = 72;  // utf8_length utf8 wstr_length
    L.str_data_any = 72;
    L.str_basicsize = 80;
    L.state_ready_shift = 7;
  } else if (minor == 12) {
    L.tstate_cframe = 56;
    L.cframe_current_frame = 0;
    L.frame_code = 0;
    L.frame_previous = 8;
    L.frame_instr = 56;  // prev_instr
    L.frame_owner = 70;
    L.code_firstlineno = 68;
    L.code_firsttraceable = 176;
    L.code_adaptive = 192;
    L.code_basicsize = 200;
    L.str_ascii_size = 40;
    L.str_compact_size = 56;
    L.str_data_any = 56;
    L.str_basicsize = 64;
  } else {
    return false;
  }
  *out = L;
  return true;
}

bool debug_offsets_fields(int minor, DebugOffsetsFields* out) noexcept {
  if (minor == 13) {
    fill_fields<DebugOffsets313>(out);
    return true;
  }
  if (minor == 14) {
    fill_fields<DebugOffsets314>(out);
    return true;
  }
  return false;
}

bool layout_from_debug_offsets(int minor, const void* debug_offsets, size_t available, PyLayout* out,
                               const char** why) noexcept {
  const char* dummy;
  if (!why) why = &dummy;
  if (!debug_offsets || !out) {
    *why = "no debug offsets";
    return false;
  }
  if (minor == 13) {
    DebugOffsets313 d;
    if (available < sizeof d) {
      *why = "debug offsets truncated";
      return false;
    }
    std::memcpy(&d, debug_offsets, sizeof d);
    return build_from(13, d, out, why);
  }
  if (minor == 14) {
    DebugOffsets314 d;
    if (available < sizeof d) {
      *why = "debug offsets truncated";
      return false;
    }
    std::memcpy(&d, debug_offsets, sizeof d);
    return build_from(14, d, out, why);
  }
  *why = "no known _Py_DebugOffsets layout for this version";
  return false;
}

}  // namespace pystack
}  // namespace cdsa
