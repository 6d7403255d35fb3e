// Per-version CPython layouts: see python_layout.h.
#include "shim/stacks/python_layout.h"

#include <cstring>

namespace cdsa {
namespace pystack {
namespace {

// ---------------------------------------------------------------------------
// Mirrors of _Py_DebugOffsets (Include/internal/pycore_runtime.h in 3.13,
// Include/internal/pycore_debug_offsets.h in 3.14), x86-64: one description,
// DebugOffsets<V>, where V says what differs between the versions. Only the
// positions matter; groups the walker does not read are plain arrays.

struct ThreadStateOffsets {
  uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
};
struct PyObjectOffsets {
  uint64_t size, ob_type;
};
struct TypeObjectOffsets {
  uint64_t size, tp_name, tp_repr, tp_flags;
};
struct UnicodeObjectOffsets {
  uint64_t size, state, length, asciiobject_size;
};
// The frame and code groups as 3.13 has them; a later version appends `More`.
template <class More>
struct InterpreterFrameOffsets {
  uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  [[no_unique_address]] More more;
};
template <class More>
struct CodeObjectOffsets {
  uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
      co_code_adaptive;
  [[no_unique_address]] More more;
};

template <class V>
struct DebugOffsets {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  uint64_t runtime_state[3];
  uint64_t interpreter_state[V::kInterpreterStateFields];
  ThreadStateOffsets thread_state;
  InterpreterFrameOffsets<typename V::FrameMore> interpreter_frame;
  CodeObjectOffsets<typename V::CodeMore> code_object;
  PyObjectOffsets pyobject;
  TypeObjectOffsets type_object;
  uint64_t tuple_object[3];
  uint64_t list_object[3];
  [[no_unique_address]] typename V::SetObject set_object;
  uint64_t dict_object[3];
  uint64_t float_object[2];
  uint64_t long_object[3];
  uint64_t bytes_object[3];
  UnicodeObjectOffsets unicode_object;
  uint64_t gc[2];
  [[no_unique_address]] typename V::Tail tail;
};

// What a version lacks is an empty struct, each of its own type: it takes no room.
struct Python313 {
  static constexpr int kInterpreterStateFields = 13;
  struct FrameMore {};
  struct CodeMore {};
  struct SetObject {};
  struct Tail {};
};
struct Python314 {
  // size id next threads_head threads_main gc imports_modules sysdict builtins
  // ceval_gil gil_runtime_state gil_runtime_state_{enabled,locked,holder}
  // code_object_generation tlbc_generation
  static constexpr int kInterpreterStateFields = 16;
  struct FrameMore {
    uint64_t stackpointer, tlbc_index;
  };
  struct CodeMore {
    uint64_t co_tlbc;
  };
  struct SetObject {
    uint64_t fields[4];
  };
  struct Tail {
    uint64_t gen_object[4], llist_node[2], debugger_support[6];
  };
};
using DebugOffsets313 = DebugOffsets<Python313>;
using DebugOffsets314 = DebugOffsets<Python314>;
// The groups 3.13 lacks take no room: the mirror ends where gc does and dict_object follows list_object.
static_assert(sizeof(DebugOffsets313) == offsetof(DebugOffsets313, gc) + sizeof(DebugOffsets313::gc));
static_assert(offsetof(DebugOffsets313, dict_object) ==
              offsetof(DebugOffsets313, list_object) + sizeof(DebugOffsets313::list_object));
static_assert(sizeof(DebugOffsets313::interpreter_frame) == 6 * sizeof(uint64_t));
static_assert(sizeof(DebugOffsets313::code_object) == 10 * sizeof(uint64_t));

template <class D>
void fill_fields(DebugOffsetsFields* f) {
#define CDSA_POSITION(field, member, ...) f->field = static_cast<int32_t>(offsetof(D, member));
  CDSA_PY_DEBUG_OFFSETS_FIELDS(CDSA_POSITION, CDSA_POSITION, CDSA_POSITION)
#undef CDSA_POSITION
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
  // PyTypeObject = PyVarObject; tp_name, tp_basicsize, tp_itemsize, tp_dealloc (the debug offsets give no tp_dealloc).
  L->type_dealloc = L->ob_size + 32;
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

template <class D>
bool parse(int minor, const void* debug_offsets, size_t available, PyLayout* out, const char** why) {
  D d;
  if (available < sizeof d) {
    *why = "debug offsets truncated";
    return false;
  }
  std::memcpy(&d, debug_offsets, sizeof d);
  return build_from(minor, d, out, why);
}

// The hard-coded layouts of 3.10, 3.11 and 3.12 (x86-64, default builds), one column per version: every int32_t
// field of PyLayout, -1 where the version has no such field.
struct BuiltinRow {
  int32_t PyLayout::*field;
  int32_t v310, v311, v312;
};
constexpr BuiltinRow kBuiltinLayouts[] = {
    // 3.10: the frames are PyFrameObjects.
    {&PyLayout::tstate_frame, 24, -1, -1},  // prev next interp frame
    {&PyLayout::frame_lasti, 96, -1, -1},
    {&PyLayout::code_code, 48, -1, -1},
    // 3.11, 3.12: PyThreadState -> _PyCFrame -> _PyInterpreterFrame.
    {&PyLayout::tstate_cframe, -1, 56, 56},
    {&PyLayout::cframe_current_frame, -1, 8, 0},  // 3.11: after uint8_t use_tracing
    {&PyLayout::tstate_current_frame, -1, -1, -1},
    // 3.10 PyFrameObject: PyObject_VAR_HEAD f_back f_code; 3.11: f_func f_globals f_builtins f_locals f_code.
    {&PyLayout::frame_code, 32, 32, 0},
    {&PyLayout::frame_previous, 24, 48, 8},
    {&PyLayout::frame_instr, -1, 56, 56},  // prev_instr
    {&PyLayout::frame_owner, -1, 69, 70},
    // FRAME_OWNED_BY_GENERATOR; 3.10 has no frame owners: every frame on the chain is shown.
    {&PyLayout::owner_generator, -1, 1, 1},
    {&PyLayout::owner_skip_min, -1, 3, 3},  // 3.11: owners are 0..2; 3.12: FRAME_OWNED_BY_CSTACK
    {&PyLayout::code_filename, 104, 112, 112},
    {&PyLayout::code_name, 112, 120, 120},
    {&PyLayout::code_qualname, 112, 128, 128},  // 3.10: co_name (CPython 3.10 tracebacks print it too)
    {&PyLayout::code_linetable, 120, 136, 136},
    {&PyLayout::code_firstlineno, 40, 72, 68},
    {&PyLayout::code_firsttraceable, -1, 168, 176},
    {&PyLayout::code_adaptive, -1, 184, 192},
    {&PyLayout::code_basicsize, 176, 192, 200},
    {&PyLayout::ob_type, 8, 8, 8},
    {&PyLayout::ob_size, 16, 16, 16},
    {&PyLayout::type_flags, 168, 168, 168},
    {&PyLayout::type_dealloc, 48, 48, 48},
    {&PyLayout::str_length, 16, 16, 16},
    {&PyLayout::str_state, 32, 32, 32},
    {&PyLayout::str_ascii_size, 48, 48, 40},    // 3.10, 3.11: has wchar_t *wstr
    {&PyLayout::str_compact_size, 72, 72, 56},  // utf8_length utf8 (3.10, 3.11: wstr_length)
    {&PyLayout::str_data_any, 72, 72, 56},
    {&PyLayout::str_basicsize, 80, 80, 64},
    {&PyLayout::state_kind_shift, 2, 2, 2},
    {&PyLayout::state_compact_shift, 5, 5, 5},
    {&PyLayout::state_ascii_shift, 6, 6, 6},
    {&PyLayout::state_ready_shift, 7, 7, -1},
};

}  // namespace

bool builtin_layout(int minor, PyLayout* out) noexcept {
  if (minor < 10 || minor > 12) return false;
  PyLayout L;
  L.minor = minor;
  for (const BuiltinRow& r : kBuiltinLayouts) L.*r.field = minor == 10 ? r.v310 : minor == 11 ? r.v311 : r.v312;
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
  if (minor == 13) return parse<DebugOffsets313>(13, debug_offsets, available, out, why);
  if (minor == 14) return parse<DebugOffsets314>(14, debug_offsets, available, out, why);
  *why = "no known _Py_DebugOffsets layout for this version";
  return false;
}

}  // namespace pystack
}  // namespace cdsa
