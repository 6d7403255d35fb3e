// CPython frame walker: see python_stack.h for the contract (the verified chain cache in front of it:
// python_chain_cache.cc; the count of code objects freed: code_frees.h).
//
// How a capture works (same walk as CPython's own traceback code):
//   tstate = PyGILState_GetThisThreadState()      (TLS read; fine without GIL)
//   frame  = tstate->cframe->current_frame        (3.11, 3.12)
//          | tstate->current_frame                (3.13+)
//          | tstate->frame                        (3.10: PyFrameObject chain
//                                                  through f_back, offset
//                                                  f_lasti * 2, nothing hidden)
//   for (; frame; frame = frame->previous)
//     skip frames CPython hides: owner >= 3 (C-stack entry / interpreter-owned
//     frames: 3.12+), executable not a code object (3.13+), and incomplete
//     frames (not owned by a generator and instr < co_code_adaptive +
//     _co_firsttraceable: _PyFrame_IsIncomplete in every version);
//     record (code, instr - co_code_adaptive, fingerprint).
// The instruction pointer field is prev_instr (3.11/3.12) or instr_ptr
// (3.13+); CPython computes f_lineno from it with exactly this offset
// (_PyInterpreterFrame_LASTI * sizeof(_Py_CODEUNIT)) and PyCode_Addr2Line.
#include "shim/stacks/python_stack.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "shim/stacks/code_frees.h"
#include "shim/stacks/python_walker_internal.h"

namespace cdsa {
namespace pystack {

size_t encode_utf8(const void* data, int kind, size_t length, char* out, size_t cap) noexcept {
  if (!out || cap == 0) return 0;
  size_t w = 0;
  const auto* p1 = static_cast<const uint8_t*>(data);
  const auto* p2 = static_cast<const uint16_t*>(data);
  const auto* p4 = static_cast<const uint32_t*>(data);
  for (size_t i = 0; i < length; ++i) {
    uint32_t cp = kind == 1 ? p1[i] : kind == 2 ? p2[i] : p4[i];
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
    char buf[4];
    size_t n;
    if (cp < 0x80) {
      buf[0] = char(cp);
      n = 1;
    } else if (cp < 0x800) {
      buf[0] = char(0xC0 | (cp >> 6));
      buf[1] = char(0x80 | (cp & 0x3F));
      n = 2;
    } else if (cp < 0x10000) {
      buf[0] = char(0xE0 | (cp >> 12));
      buf[1] = char(0x80 | ((cp >> 6) & 0x3F));
      buf[2] = char(0x80 | (cp & 0x3F));
      n = 3;
    } else {
      buf[0] = char(0xF0 | (cp >> 18));
      buf[1] = char(0x80 | ((cp >> 12) & 0x3F));
      buf[2] = char(0x80 | ((cp >> 6) & 0x3F));
      buf[3] = char(0x80 | (cp & 0x3F));
      n = 4;
    }
    if (w + n + 1 > cap) break;
    std::memcpy(out + w, buf, n);
    w += n;
  }
  out[w] = '\0';
  return w;
}

Runtime g_rt;
std::atomic<int> g_state{kUninit};
}  // namespace pystack

namespace {

using namespace pystack;

std::mutex g_init_mu;
char g_desc[256] = "Python walker not initialised";

constexpr unsigned long kUnicodeSubclassFlag = 1UL << 28;  // Py_TPFLAGS_UNICODE_SUBCLASS

void format_version(unsigned long hex, char* out, size_t cap) {
  const unsigned major = (hex >> 24) & 0xff, minor = (hex >> 16) & 0xff, micro = (hex >> 8) & 0xff,
                 level = (hex >> 4) & 0xf, serial = hex & 0xf;
  const char* lv = level == 0xA ? "a" : level == 0xB ? "b" : level == 0xC ? "rc" : "";
  if (*lv)
    std::snprintf(out, cap, "%u.%u.%u%s%u", major, minor, micro, lv, serial);
  else
    std::snprintf(out, cap, "%u.%u.%u", major, minor, micro);
}

void* sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// Runs once, under g_init_mu. Returns the state; fills g_desc and g_rt.
PyWalkerState detect() noexcept {
  auto* py_version = static_cast<const unsigned long*>(sym("Py_Version"));
  auto* get_version = reinterpret_cast<const char* (*)(void)>(sym("Py_GetVersion"));
  char ver[32] = "?";
  int major = 0, minor = 0;
  unsigned long hex = 0;
  if (py_version) {
    hex = *py_version;
    format_version(hex, ver, sizeof ver);
    major = int((hex >> 24) & 0xff);
    minor = int((hex >> 16) & 0xff);
  } else if (get_version) {
    // 3.10 and older have no Py_Version; Py_GetVersion() formats a static
    // buffer ("3.10.13 (main, ...") and needs no interpreter state.
    const char* v = get_version();
    size_t i = 0;
    while (v && v[i] && v[i] != ' ' && i + 1 < sizeof ver) {
      ver[i] = v[i];
      ++i;
    }
    ver[i] = '\0';
    if (std::sscanf(ver, "%d.%d", &major, &minor) != 2) major = minor = 0;
  } else {
    std::snprintf(g_desc, sizeof g_desc, "no Python interpreter in this process");
    return PyWalkerState::NoPython;
  }
  if (major != 3 || minor < kPythonMinMinor || minor > kPythonMaxMinor) {
    std::snprintf(g_desc, sizeof g_desc,
                  "CPython %s: unsupported version (3.%d-3.%d are), Python "
                  "frames disabled",
                  ver, kPythonMinMinor, kPythonMaxMinor);
    return PyWalkerState::Unsupported;
  }

  Runtime rt;
  rt.this_thread_state = reinterpret_cast<void* (*)(void)>(sym("PyGILState_GetThisThreadState"));
  rt.addr2line = reinterpret_cast<int (*)(const void*, int)>(sym("PyCode_Addr2Line"));
  rt.bytes_type = sym("PyBytes_Type");
  rt.code_type = sym("PyCode_Type");
  rt.str_type = sym("PyUnicode_Type");
  const void* type_type = sym("PyType_Type");
  const char* missing = !rt.this_thread_state ? "PyGILState_GetThisThreadState"
                        : !rt.addr2line       ? "PyCode_Addr2Line"
                        : !rt.code_type       ? "PyCode_Type"
                        : !rt.str_type        ? "PyUnicode_Type"
                        : !type_type          ? "PyType_Type"
                        : !rt.bytes_type      ? "PyBytes_Type"
                                              : nullptr;
  if (missing) {
    std::snprintf(g_desc, sizeof g_desc, "CPython %s: symbol %s not found, Python frames disabled", ver, missing);
    return PyWalkerState::Unsupported;
  }

  const char* source;
  if (minor <= 12) {
    pystack::builtin_layout(minor, &rt.L);
    source = "built-in layout";
  } else {
    const void* runtime = sym("_PyRuntime");
    const char* why = "symbol _PyRuntime not found";
    // _Py_DebugOffsets is the first member of _PyRuntimeState, statically
    // initialised: readable before Py_Initialize and without the GIL.
    if (!runtime || !pystack::layout_from_debug_offsets(minor, runtime, 4096, &rt.L, &why)) {
      std::snprintf(g_desc, sizeof g_desc, "CPython %s: %s, Python frames disabled", ver, why);
      return PyWalkerState::Unsupported;
    }
    if (load<uint64_t>(static_cast<const char*>(runtime) + 8) != hex) {
      std::snprintf(g_desc, sizeof g_desc,
                    "CPython %s: _PyRuntime.debug_offsets version differs from "
                    "Py_Version, Python frames disabled",
                    ver);
      return PyWalkerState::Unsupported;
    }
    source = "debug offsets";
  }

  // Cross-check the layout against the type objects, which are static data:
  // object header (catches Py_TRACE_REFS builds), start of the bytecode in a
  // code object, sizeof(PyUnicodeObject), tp_flags position.
  const PyLayout& L = rt.L;
  auto* ct = static_cast<const char*>(rt.code_type);
  auto* st = static_cast<const char*>(rt.str_type);
  const int basicsize = L.ob_size + 16;  // ob_size, tp_name, tp_basicsize
  const bool sane = load<const void*>(ct + L.ob_type) == type_type && load<const void*>(st + L.ob_type) == type_type &&
                    // 3.11+: PyCode_Type.tp_basicsize is offsetof(PyCodeObject, co_code_adaptive), tp_itemsize one
                    // _Py_CODEUNIT; 3.10: sizeof(PyCodeObject), not a variable-size object.
                    load<int64_t>(ct + basicsize) == (L.code_adaptive >= 0 ? L.code_adaptive : L.code_basicsize) &&
                    load<int64_t>(ct + basicsize + 8) == (L.code_adaptive >= 0 ? 2 : 0) &&
                    load<int64_t>(st + basicsize) == L.str_basicsize &&
                    (load<unsigned long>(st + L.type_flags) & kUnicodeSubclassFlag) != 0 &&
                    (load<unsigned long>(ct + L.type_flags) & kUnicodeSubclassFlag) == 0;
  if (!sane) {
    std::snprintf(g_desc, sizeof g_desc,
                  "CPython %s: object layout differs from the expected one "
                  "(unusual build?), Python frames disabled",
                  ver);
    return PyWalkerState::Unsupported;
  }
  g_rt = rt;
  count_code_frees(g_rt.code_type, g_rt.L.type_dealloc);
  make_reader(g_rt);
  std::snprintf(g_desc, sizeof g_desc, "CPython %s (%s%s)", ver, source,
                code_frees_now() == kUncounted ? ", code frees not counted" : "");
  return PyWalkerState::Ready;
}


inline bool is_code(const Runtime& R, const char* code) noexcept {
  return code && load<const void*>(code + R.L.ob_type) == R.code_type;
}

// Decodes a str object into UTF-8; "?" if it is not a readable str.
void write_str(const Runtime& R, const char* s, char* out, size_t cap) noexcept {
  if (!out || cap == 0) return;
  const PyLayout& L = R.L;
  out[0] = '\0';
  if (!s) return;
  const auto* type = load<const char*>(s + L.ob_type);
  if (type != R.str_type && (!type || !(load<unsigned long>(type + L.type_flags) & kUnicodeSubclassFlag))) {
    pystack::encode_utf8("?", 1, 1, out, cap);
    return;
  }
  const uint32_t state = load<uint32_t>(s + L.str_state);
  int kind_shift = L.state_kind_shift, compact_shift = L.state_compact_shift, ascii_shift = L.state_ascii_shift;
  if (L.state_auto && (state & 0xffff) <= 3) {
    // `uint16_t interned; unsigned short kind:3, compact:1, ascii:1, ...`.
    // With the bitfield encoding the low half is never <= 3: kind (1, 2 or 4)
    // sits at bits 2..4.
    kind_shift = 16;
    compact_shift = 19;
    ascii_shift = 20;
  }
  const int kind = int((state >> kind_shift) & 7);
  const bool compact = (state >> compact_shift) & 1;
  const bool ascii = (state >> ascii_shift) & 1;
  const bool not_ready = L.state_ready_shift >= 0 && !((state >> L.state_ready_shift) & 1);
  const int64_t length = load<int64_t>(s + L.str_length);
  const char* data =
      compact ? s + (ascii ? L.str_ascii_size : L.str_compact_size) : load<const char*>(s + L.str_data_any);
  if (not_ready || (kind != 1 && kind != 2 && kind != 4) || length < 0 || !data) {
    pystack::encode_utf8("?", 1, 1, out, cap);
    return;
  }
  pystack::encode_utf8(data, kind, size_t(length), out, cap);
}

}  // namespace

PyWalkerState python_walker_init() noexcept {
  int s = g_state.load(std::memory_order_acquire);
  if (s != kUninit) return PyWalkerState(s);
  std::lock_guard<std::mutex> lock(g_init_mu);
  s = g_state.load(std::memory_order_relaxed);
  if (s != kUninit) return PyWalkerState(s);
  const PyWalkerState r = detect();
  g_state.store(int(r), std::memory_order_release);
  return r;
}

const char* python_walker_description() noexcept {
  python_walker_init();
  return g_desc;
}

int capture_python_frames(PyFrameKey* out, int max) noexcept { return capture_python_frames(out, max, nullptr); }

namespace {

// 3.10: the chain of PyFrameObjects from tstate->frame through f_back. Every frame on it is shown by
// tracebacks (no owners, no incomplete frames); f_lasti counts code units, -1 before the first instruction.
int capture_frame_objects(const Runtime& R, const char* ts, PyFrameKey* out, int max, bool* truncated) noexcept {
  const PyLayout& L = R.L;
  const int32_t o_back = L.frame_previous, o_code = L.frame_code, o_lasti = L.frame_lasti, o_ob_type = L.ob_type;
  const void* const code_type = R.code_type;
  const FpOffsets fo = fp_offsets(L);
  int n = 0;
  const char* frame = load<const char*>(ts + L.tstate_frame);
  for (int guard = kMaxWalk; frame && guard > 0; frame = load<const char*>(frame + o_back), --guard) {
    const auto* code = load<const char*>(frame + o_code);
    if (!code || load<const void*>(code + o_ob_type) != code_type) continue;
    if (n == max) {
      if (truncated) *truncated = true;
      break;
    }
    out[n].code = code;
    out[n].instr_offset = load<int32_t>(frame + o_lasti) * 2;  // bytes, as PyFrame_GetLineNumber passes it
    out[n].code_check = fingerprint(fo, code);
    ++n;
  }
  return n;
}

}  // namespace

int capture_python_frames(PyFrameKey* out, int max, bool* truncated) noexcept {
  if (truncated) *truncated = false;
  if (!out || max <= 0 || !ready()) return 0;
  const Runtime& R = g_rt;
  const auto* ts = static_cast<const char*>(R.this_thread_state());
  if (!ts) return 0;
  if (R.L.tstate_frame >= 0) return capture_frame_objects(R, ts, out, max, truncated);
  // Offsets in locals: the stores to out[] could otherwise alias g_rt and
  // force a reload of every offset on every frame.
  const PyLayout& L = R.L;
  const int32_t o_previous = L.frame_previous, o_owner = L.frame_owner, o_code = L.frame_code, o_instr = L.frame_instr,
                o_ob_type = L.ob_type, o_adaptive = L.code_adaptive, o_firsttraceable = L.code_firsttraceable;
  const int owner_skip_min = L.owner_skip_min, owner_generator = L.owner_generator;
  const uintptr_t tag_mask = ~uintptr_t(L.code_tag_mask);
  const void* const code_type = R.code_type;
  const FpOffsets fo = fp_offsets(L);

  const char* frame;
  if (L.tstate_cframe >= 0) {
    const auto* cframe = load<const char*>(ts + L.tstate_cframe);
    if (!cframe) return 0;
    frame = load<const char*>(cframe + L.cframe_current_frame);
  } else {
    frame = load<const char*>(ts + L.tstate_current_frame);
  }
  int n = 0;
  for (int guard = kMaxWalk; frame && guard > 0; frame = load<const char*>(frame + o_previous), --guard) {
    const int owner = static_cast<signed char>(frame[o_owner]);
    if (owner >= owner_skip_min) continue;  // C-stack / interpreter frames
    const auto* code = reinterpret_cast<const char*>(load<uintptr_t>(frame + o_code) & tag_mask);
    // 3.13+: the executable may be None or another non-code object.
    if (!code || load<const void*>(code + o_ob_type) != code_type) continue;
    const ptrdiff_t off = load<const char*>(frame + o_instr) - (code + o_adaptive);
    if (owner != owner_generator && off < ptrdiff_t(load<int32_t>(code + o_firsttraceable)) * 2)
      continue;  // incomplete frame (_PyFrame_IsIncomplete)
    if (n == max) {
      if (truncated) *truncated = true;
      break;
    }
    out[n].code = code;
    out[n].instr_offset = int32_t(off);
    out[n].code_check = fingerprint(fo, code);
    ++n;
  }
  return n;
}

bool resolve_python_frame(const PyFrameKey& key, char* file, size_t file_cap, char* function, size_t function_cap,
                          int* line) noexcept {
  if (file && file_cap) file[0] = '\0';
  if (function && function_cap) function[0] = '\0';
  if (line) *line = 0;
  if (!ready()) return false;
  const Runtime& R = g_rt;
  const PyLayout& L = R.L;
  const auto* code = static_cast<const char*>(key.code);
  if (!is_code(R, code) || fingerprint(fp_offsets(L), code) != key.code_check) return false;
  // Bytes of bytecode: 3.11+ code objects hold it (ob_size code units), 3.10 points to a bytes object.
  int64_t nbytes = 0;
  if (L.code_code >= 0) {
    const auto* bytecode = load<const char*>(code + L.code_code);
    if (!bytecode || load<const void*>(bytecode + L.ob_type) != R.bytes_type) return false;
    nbytes = load<int64_t>(bytecode + L.ob_size);
  } else {
    nbytes = load<int64_t>(code + L.ob_size) * 2;
  }
  if (key.instr_offset < -2 || key.instr_offset >= nbytes) return false;
  write_str(R, load<const char*>(code + L.code_filename), file, file_cap);
  write_str(R, load<const char*>(code + L.code_qualname), function, function_cap);
  // Negative offset (frame not started yet): PyCode_Addr2Line returns
  // co_firstlineno, as f_lineno does.
  if (line) *line = R.addr2line(code, key.instr_offset);
  return true;
}

uint32_t python_code_check(const void* code) noexcept {
  if (!ready()) return 0;
  const auto* c = static_cast<const char*>(code);
  if (!is_code(g_rt, c)) return 0;
  return fingerprint(fp_offsets(g_rt.L), c);
}

namespace pystack {
const PyLayout* active_layout() noexcept { return ready() ? &g_rt.L : nullptr; }
}  // namespace pystack

}  // namespace cdsa
