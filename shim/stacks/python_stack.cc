// CPython frame walker: see python_stack.h for the contract.
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
#include <link.h>

#include <emmintrin.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "shim/common/thread_block.h"

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

}  // namespace pystack

// ---------------------------------------------------------------------------
namespace {

using pystack::PyLayout;

enum : int { kUninit = -1 };

struct Runtime {
  PyLayout L;
  void* (*this_thread_state)(void) = nullptr;    // PyGILState_GetThisThreadState
  int (*addr2line)(const void*, int) = nullptr;  // PyCode_Addr2Line
  const void* code_type = nullptr;               // &PyCode_Type
  const void* str_type = nullptr;                // &PyUnicode_Type
  const void* bytes_type = nullptr;              // &PyBytes_Type (3.10: co_code)
};

Runtime g_rt;
std::atomic<int> g_state{kUninit};

// Code objects freed since the walker counted them (kUncounted: not counted). detect() puts a counting wrapper in
// PyCode_Type's tp_dealloc slot (every code object's deallocation goes through it: _Py_Dealloc calls the type's
// slot), which adds one before the interpreter's own function frees the object. A verified chain remembers the count
// at which its code objects' identity words were last read: while the count is unchanged, no code object was freed
// since, so a frame's unchanged code word still names the very object read then (see "Why a verified chain is
// exact" below).
constexpr uint64_t kUncounted = ~uint64_t{0};
using CodeDealloc = void (*)(void*);
std::atomic<uint64_t> g_code_frees{kUncounted};
std::atomic<CodeDealloc> g_code_dealloc{nullptr};  // the interpreter's own (or what another layer put there)

void counting_code_dealloc(void* code) {
  g_code_frees.fetch_add(1, std::memory_order_seq_cst);  // before the object's memory can be reused
  g_code_dealloc.load(std::memory_order_acquire)(code);
}

CodeDealloc* g_dealloc_slot = nullptr;  // PyCode_Type's tp_dealloc, once the wrapper is in it

inline uint64_t code_frees_now() noexcept { return g_code_frees.load(std::memory_order_acquire); }
// Whether another layer has put its own function into the slot after cdsa's wrapper. A layer that wraps the slot
// calls on what it found there, as cdsa's wrapper does, and the count stays right; one that does not would leave frees
// uncounted, so once the slot is found changed the frees stay uncounted for good. Checked where a chain is filled or
// fully checked (a miss), not on the launch path's hit.
void check_dealloc_slot() noexcept {
  if (code_frees_now() != kUncounted && __atomic_load_n(g_dealloc_slot, __ATOMIC_RELAXED) != &counting_code_dealloc)
    g_code_frees.store(kUncounted, std::memory_order_seq_cst);
}
// What a chain remembers of a count: never kUncounted (0 then, which no count is: counts start at 1), so an
// uncounted capture never matches it.
inline uint64_t remembered(uint64_t frees) noexcept { return frees == kUncounted ? 0 : frees; }
std::mutex g_init_mu;
char g_desc[256] = "Python walker not initialised";

constexpr unsigned long kUnicodeSubclassFlag = 1UL << 28;  // Py_TPFLAGS_UNICODE_SUBCLASS
constexpr int kMaxWalk = 1 << 20;                          // frames visited per capture (cycle guard)

template <class T>
inline T load(const char* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Fingerprint of a code object's immutable identity. Kept to a few
// independent loads and multiplies: it is computed for every captured frame.
struct FpOffsets {
  int32_t filename, qualname, linetable, firstlineno;
};

inline FpOffsets fp_offsets(const PyLayout& L) noexcept {
  return {L.code_filename, L.code_qualname, L.code_linetable, L.code_firstlineno};
}

// The identity words folded into one value; the fingerprint is a function of it (an equal ident, an equal
// fingerprint), which the chain check compares instead of the fingerprint itself.
inline uint64_t ident(const FpOffsets& o, const char* code) noexcept {
  const uint64_t a = load<uintptr_t>(code + o.filename);
  const uint64_t b = load<uintptr_t>(code + o.qualname);
  const uint64_t c = load<uintptr_t>(code + o.linetable);  // per-code bytes object
  const uint64_t d = uint32_t(load<int32_t>(code + o.firstlineno));
  return c ^ rotl(b, 32) ^ rotl(a, 16) ^ (d << 3);
}

inline uint32_t fingerprint_of(uint64_t ident) noexcept {
  const uint32_t r = uint32_t((ident * 0x9E3779B97F4A7C15ULL) >> 32);
  return r ? r : 1u;
}

inline uint32_t fingerprint(const FpOffsets& o, const char* code) noexcept { return fingerprint_of(ident(o, code)); }

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

// Whether the word at `addr` lies in a loaded object's writable data: a PT_LOAD segment with PF_W, outside its
// PT_GNU_RELRO range (made read-only after relocation).
bool in_writable_data(const void* addr) {
  struct Query {
    uintptr_t at;
    bool found, writable;
  } q{reinterpret_cast<uintptr_t>(addr), false, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto* q = static_cast<Query*>(arg);
        bool in_load = false, writable = false, in_relro = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (q->at < lo || q->at + sizeof(void*) > hi) continue;
          if (ph.p_type == PT_LOAD) in_load = true, writable = (ph.p_flags & PF_W) != 0;
          if (ph.p_type == PT_GNU_RELRO) in_relro = true;
        }
        if (!in_load) return 0;
        q->found = true;
        q->writable = writable && !in_relro;
        return 1;
      },
      &q);
  return q.found && q.writable;
}

// Puts counting_code_dealloc in PyCode_Type's tp_dealloc slot (the layout's type_dealloc), where the type object is
// writable data; else the code frees stay uncounted and every verified
// chain reads its code objects' identity words again at each capture, as before.
void count_code_frees(const Runtime& R) {
  auto* type = static_cast<char*>(const_cast<void*>(R.code_type));
  auto* slot = reinterpret_cast<CodeDealloc*>(type + R.L.type_dealloc);
  if (!in_writable_data(slot)) return;
  CodeDealloc orig = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!orig || orig == &counting_code_dealloc) return;
  g_code_dealloc.store(orig, std::memory_order_release);
  g_dealloc_slot = slot;
  g_code_frees.store(1, std::memory_order_seq_cst);  // no chain reads the count before the walker is Ready
  if (!__atomic_compare_exchange_n(slot, &orig, &counting_code_dealloc, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    g_code_frees.store(kUncounted, std::memory_order_seq_cst);  // another layer changed the slot just now
}

void make_reader(const Runtime& R);  // the chain cache's Reader (below), from the final g_rt

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
  count_code_frees(g_rt);
  make_reader(g_rt);
  std::snprintf(g_desc, sizeof g_desc, "CPython %s (%s%s)", ver, source,
                code_frees_now() == kUncounted ? ", code frees not counted" : "");
  return PyWalkerState::Ready;
}

inline bool ready() noexcept {
  const int s = g_state.load(std::memory_order_acquire);
  if (s == int(PyWalkerState::Ready)) return true;
  if (s != kUninit) return false;
  return python_walker_init() == PyWalkerState::Ready;
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

// ---------------------------------------------------------------------------
// The verified chain cache (see python_stack.h).
//
// Why a verified chain is exact: the walk reads, for each frame it visits, the owner byte, the code / executable word
// and the instruction pointer (3.10: f_lasti), then (for a frame that is not hidden by its owner) the code object's
// type and, for a code object, its immutable fields (co_firstlineno, co_filename, co_qualname, co_linetable,
// _co_firsttraceable, co_code_adaptive's offset); and the frame's link to go on. Its result is a function of those
// words and of where the chain ends. The check reads the same words along the live links (a frame is read only once
// the link that leads to it is the one the walk read, and every frame on the thread's chain is alive: the thread is
// in native code, so the chain cannot change under us) and compares them with the walk's; the last link must be null
// again where the chain ended there. The code objects' fields are guarded by the identity words: the frame holds a
// strong reference to its code object, so the object at an unchanged address is either the same object (immutable
// fields) or another object allocated where a freed one was, which is still a code object with the same four words
// only if CPython put new strings and a new line table at the old ones' addresses too. The same check serves in
// every version: the words' offsets come from the layout (3.10: frame objects, no owner; 3.11/3.12: built-in;
// 3.13/3.14: debug offsets; 3.14's tagged f_executable: tag bits cleared before the code object is read, compared
// with them); nothing in it depends on the version beyond the Reader's offsets.
//
// Two shortcuts, both resting on the count of code objects freed (g_code_frees; a chain remembers the count at which
// its guards last held):
//  * While the count is unchanged, no code object was freed, so every code object the chain's frames held when the
//    guards last held is still alive, the same object: an unchanged code word names it, and its guards hold without
//    being read.
//  * By instruction (3.11+, a chain whose frames all have by_instr): then the code words and owner bytes are not
//    compared either, only the links and instruction pointers. A 3.11+ frame's instruction pointer lies inside its
//    own code object (co_code_adaptive, or two bytes before it in a 3.11/3.12 frame that has not started), except an
//    entry frame's (3.12: the interpreter's trampoline code object, 3.13/3.14: the static
//    _Py_INTERPRETER_TRAMPOLINE_INSTRUCTIONS; their ceval.c sets it, with owner FRAME_OWNED_BY_CSTACK (3.12, 3.13) or
//    FRAME_OWNED_BY_INTERPRETER (3.14), the owners cdsa hides, and no other frame gets those owners). Live objects do
//    not overlap, so an unchanged instruction pointer of a frame whose code object is still alive (the count) means
//    the same code object, and an entry frame's means an entry frame again. The owner byte decides nothing else for
//    a frame the walk showed at or past its first traceable instruction (by_instr: only an incomplete frame, before
//    it, depends on the owner being a generator or not); frames the walk found incomplete, or with an executable
//    that is not a code object, keep the chain on the full check. 3.10 (an instruction index, not a pointer) always
//    compares the words.
namespace {

constexpr int kChainFrames = 48;  // frames visited per cached chain
constexpr int kChainWays = 16, kChainSets = 32;  // 512 chains

enum : uint8_t { kHidden = 0, kNotCode = 1, kShown = 2, kIncomplete = 3 };
// What the walk read of one visited frame, in two parts: the words the check compares (in one pass, with no
// branch but the one on their difference), and what the walk made of them (used again only by a partial re-walk).
struct ChainWords {
  uintptr_t next;       // its link (previous / f_back) as the walk read it; 0 at the chain's end
  uintptr_t code_word;  // f_code / f_executable
  uintptr_t instr;      // the instruction pointer (3.11+) or f_lasti (3.10)
  uint64_t owner;       // its owner byte (3.10: 0)
};
static_assert(sizeof(ChainWords) == 32 && kChainFrames < 256, "four words per frame");
struct ChainMeta {
  uint8_t kind;        // what the walk made of it
  uint8_t by_instr;    // its instruction pointer alone says what the walk made of it (see verified_prefix_t)
  uint8_t guard;       // its code object is checked (not hidden, and not the same code as the frame before)
  uint8_t out_before;  // frames shown before this one
  uint32_t check;      // the code object's fingerprint (kNotCode / kHidden: 0)
};
// A guarded frame: its code object (tag bits cleared) and the identity words the fingerprint is made of, folded into
// one 64-bit value (ident(): the fingerprint is a function of it, so an equal ident is an equal fingerprint).
struct ChainGuard {
  const char* code;  // kNotCode: the word as read, tag bits cleared (may be null)
  uint64_t ident;    // kNotCode: 0
  uint8_t index;     // the frame's index in the chain
  uint8_t not_code;  // the walk found no code object there
};
struct Chain {
  uint64_t token;
  PyMemo memo;
  uintptr_t head;  // the innermost frame's address
  uint32_t succ;   // the chain served right after this one the last time (index + 1; 0: none)
  uint64_t frees;  // code_frees_now() when its code objects' guards last held
  int32_t max;
  uint16_t n_visited, n_out;
  uint8_t ends_null, truncated, n_guards, n_code_guards;  // guards: the n_code_guards code objects first
  uint8_t by_instr;  // every visited frame's is (m[i].by_instr)
  ChainWords w[kChainFrames];
  ChainMeta m[kChainFrames];
  ChainGuard g[kChainFrames];
  PyFrameKey keys[kChainFrames];
};
struct ChainCache {
  uint64_t tokens;
  uint32_t last;  // the chain served or filled last (index + 1 in c; 0: none)
  PyChainStats stats;
  alignas(16) uint32_t tags[kChainSets][kChainWays];
  uint16_t used[kChainSets];
  Chain scratch;
  Chain c[kChainSets * kChainWays];
};
static_assert(std::is_trivially_default_constructible_v<ChainCache>, "mapped zeroed");

inline uint32_t chain_tag(uintptr_t frame, uintptr_t code_word, uintptr_t instr, int max) {
  uint64_t h = (frame ^ (code_word * 0x9e3779b97f4a7c15ull) ^ (instr << 17) ^ static_cast<uint64_t>(max)) *
               0xff51afd7ed558ccdull;
  uint32_t t = static_cast<uint32_t>(h >> 32);
  return t ? t : 1;
}

// The walk's reads of one frame, shared by the walk that fills a chain and the check.
struct Reader {
  int32_t o_previous, o_owner, o_code, o_instr, o_ob_type, o_adaptive, o_firsttraceable;
  int owner_skip_min, owner_generator;
  bool hidden_by_instr;  // a hidden frame is an entry frame, known by its instruction (verified_prefix_t)
  uintptr_t tag_mask;
  const void* code_type;
  FpOffsets fo;
  bool objects;  // 3.10: frame objects, f_lasti, no owner

  Reader() = default;
  explicit Reader(const Runtime& R) {
    const PyLayout& L = R.L;
    objects = L.tstate_frame >= 0;
    o_previous = L.frame_previous;
    o_code = L.frame_code;
    o_ob_type = L.ob_type;
    code_type = R.code_type;
    fo = fp_offsets(L);
    if (objects) {
      o_instr = L.frame_lasti;
      o_owner = -1;
      o_adaptive = o_firsttraceable = 0;
      owner_skip_min = 1 << 30;
      owner_generator = -1;
      hidden_by_instr = false;
      tag_mask = ~uintptr_t(0);
    } else {
      o_instr = L.frame_instr;
      o_owner = L.frame_owner;
      o_adaptive = L.code_adaptive;
      o_firsttraceable = L.code_firsttraceable;
      owner_skip_min = L.owner_skip_min;
      owner_generator = L.owner_generator;
      hidden_by_instr = L.minor >= 12 && L.minor <= 14;  // checked against their ceval.c (verified_prefix_t)
      tag_mask = ~uintptr_t(L.code_tag_mask);
    }
  }
  uintptr_t code_word(const char* frame) const { return load<uintptr_t>(frame + o_code); }
  uintptr_t instr(const char* frame) const {
    return objects ? static_cast<uintptr_t>(static_cast<uint32_t>(load<int32_t>(frame + o_instr)))
                   : load<uintptr_t>(frame + o_instr);
  }
  uint8_t owner(const char* frame) const { return objects ? 0 : static_cast<uint8_t>(frame[o_owner]); }
};

Reader g_reader;  // made once by detect(), before the walker is Ready
void make_reader(const Runtime& R) { g_reader = Reader(R); }

const char* head_frame(const Runtime& R, const char* ts) {
  const PyLayout& L = R.L;
  if (L.tstate_frame >= 0) return load<const char*>(ts + L.tstate_frame);
  if (L.tstate_cframe >= 0) {
    const auto* cframe = load<const char*>(ts + L.tstate_cframe);
    return cframe ? load<const char*>(cframe + L.cframe_current_frame) : nullptr;
  }
  return load<const char*>(ts + L.tstate_current_frame);
}

// The walk of capture_python_frames from `frame`, with `n` frames already in out and `v` frames visited, recording
// every visited frame into c (c->n_visited = 0xffff when the chain does not fit: not to be kept). Each frame's link
// is recorded too, also where the walk stops at that frame (truncated): a live frame's field.
int walk_chain(const Reader& rd, const char* frame, int v, int n, PyFrameKey* out, int max, Chain* c,
               bool* truncated) {
  bool fits = true;
  uintptr_t prev_code = v > 0 ? c->w[v - 1].code_word : 0;
  uint8_t prev_kind = v > 0 ? c->m[v - 1].kind : uint8_t{kHidden};
  bool ended_null = true;
  for (int guard = kMaxWalk; frame && guard > 0; --guard) {
    ChainWords cf{};
    ChainMeta cm{};
    cf.next = load<uintptr_t>(frame + rd.o_previous);
    cf.owner = rd.owner(frame);
    cf.code_word = rd.code_word(frame);
    cf.instr = rd.instr(frame);
    cm.out_before = static_cast<uint8_t>(n);
    const int owner = static_cast<signed char>(cf.owner);
    bool shown = false;
    const auto* code = reinterpret_cast<const char*>(cf.code_word & rd.tag_mask);
    if (!rd.objects && owner >= rd.owner_skip_min) {
      cm.kind = kHidden;  // C-stack / interpreter frames
      cm.by_instr = rd.hidden_by_instr;
    } else if (!code || load<const void*>(code + rd.o_ob_type) != rd.code_type) {
      cm.kind = kNotCode;
    } else {
      cm.check = fingerprint(rd.fo, code);
      const int32_t off = rd.objects ? static_cast<int32_t>(cf.instr) * 2
                                     : int32_t(reinterpret_cast<const char*>(cf.instr) - (code + rd.o_adaptive));
      if (!rd.objects && owner != rd.owner_generator &&
          off < int32_t(load<int32_t>(code + rd.o_firsttraceable)) * 2) {
        cm.kind = kIncomplete;
      } else {
        cm.kind = kShown;
        cm.by_instr = !rd.objects && off >= int32_t(load<int32_t>(code + rd.o_firsttraceable)) * 2;
        shown = true;
        if (n == max) {
          if (truncated) *truncated = true;
          ended_null = false;
        } else {
          out[n].code = code;
          out[n].instr_offset = off;
          out[n].code_check = cm.check;
        }
      }
    }
    // A frame with the code object of the frame before it (recursion) is guarded there: the same object.
    const bool same_code = v > 0 && cf.code_word == prev_code && (prev_kind == kShown || prev_kind == kIncomplete) &&
                           (cm.kind == kShown || cm.kind == kIncomplete);
    cm.guard = cm.kind != kHidden && !same_code;
    if (v < kChainFrames) {
      c->w[v] = cf;
      c->m[v] = cm;
    } else {
      fits = false;
    }
    ++v;
    prev_code = cf.code_word;
    prev_kind = cm.kind;
    if (shown) {
      if (!ended_null) break;
      ++n;
    }
    frame = reinterpret_cast<const char*>(cf.next);
  }
  if (frame && ended_null) fits = false;  // stopped by the cycle guard
  c->n_visited = fits ? static_cast<uint16_t>(v) : 0xffff;
  c->n_out = static_cast<uint16_t>(n);
  c->ends_null = ended_null;
  c->truncated = !ended_null;
  c->max = max;
  return n;
}

// The guards of a walked chain (every frame it flags), in frame order: its code object's ident, or none.
void set_guards(const Reader& rd, Chain* c) {
  int k = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the code objects first, then the frames without one
    for (int i = 0; i < c->n_visited; ++i) {
      if (!c->m[i].guard || (c->m[i].kind == kNotCode) != (pass == 1)) continue;
      ChainGuard& g = c->g[k++];
      g.index = static_cast<uint8_t>(i);
      g.not_code = pass == 1;
      g.code = reinterpret_cast<const char*>(c->w[i].code_word & rd.tag_mask);
      g.ident = g.not_code ? 0 : ident(rd.fo, g.code);
    }
    if (pass == 0) c->n_code_guards = static_cast<uint8_t>(k);
  }
  c->n_guards = static_cast<uint8_t>(k);
  c->by_instr = 1;
  for (int i = 0; i < c->n_visited; ++i) c->by_instr &= c->m[i].by_instr;
}

// How many of c's visited frames still hold what the walk read, from `frame` (its head) on; *stop_at: the first
// frame not verified (nullptr past the end of a chain that ended there); *hit: every frame verified.
//
// First pass, the words: frame i is read only once frame i - 1's link was found equal to what the walk read (so
// every frame read is on the thread's live chain, and a chain that ended at a null link ends there again). Its code
// word, instruction, owner and link are compared with one branch on their difference. Second pass, the guards
// (frames whose code object the walk read: not hidden, not the same code word as a guarded frame just before):
// still a code object with the same identity words, or still no code object. The code objects' guards are skipped
// while no code object was freed since they last held (frees == c.frees, counted by counting_code_dealloc): a
// frame's code word, unchanged, then names the object the guard read. A failed guard at frame g leaves the frames
// before g verified.
template <bool kObjects>
__attribute__((always_inline)) inline int verified_prefix_t(const Reader& rd, const Chain& c, const char* frame,
                                                            uint64_t frees, const char** stop_at, bool* hit) {
  const int32_t o_code = rd.o_code, o_instr = rd.o_instr, o_owner = rd.o_owner, o_previous = rd.o_previous;
  const ChainWords* const first = c.w;
  const ChainWords* const end = first + c.n_visited;
  const ChainWords* f = first;
  const char* at = frame;
  // Whether frame `at` still holds what f records; *next: its link.
  const auto differs = [&](const ChainWords* w, const char** next) {
    const uintptr_t link = load<uintptr_t>(at + o_previous);
    uintptr_t diff = (link ^ w->next) | (load<uintptr_t>(at + o_code) ^ w->code_word);
    if constexpr (kObjects) {
      diff |= static_cast<uint32_t>(load<int32_t>(at + o_instr)) ^ w->instr;
    } else {
      diff |= (load<uintptr_t>(at + o_instr) ^ w->instr) | (static_cast<uint8_t>(at[o_owner]) ^ w->owner);
    }
    *next = reinterpret_cast<const char*>(link);
    return diff != 0;
  };
  const char* next;
  const ChainWords* const pairs_end = first + (c.n_visited & ~1u);
  for (; f != pairs_end; f += 2) {  // two frames a round (one pointer compare a round)
    if (differs(f, &next)) goto words_done;
    at = next;
    if (differs(f + 1, &next)) {
      ++f;
      goto words_done;
    }
    at = next;
  }
  if (f != end && !differs(f, &next)) {
    ++f;
    at = next;
  }
words_done:
  int k = static_cast<int>(f - first);
  const int32_t o_ob_type = rd.o_ob_type;
  const void* const code_type = rd.code_type;
  const FpOffsets fo = rd.fo;
  const auto holds = [&](const ChainGuard* g) {
    const char* code = g->code;
    return g->not_code ? !code || load<const void*>(code + o_ob_type) != code_type
                       : load<const void*>(code + o_ob_type) == code_type && ident(fo, code) == g->ident;
  };
  const ChainGuard* g = c.g;
  const ChainGuard* const g_code_end = g + c.n_code_guards;
  const ChainGuard* const g_end = g + c.n_guards;
  if (f == end) {  // every frame's words hold (a hit if the guards do): no index to compare, no kind to test
    if (frees != c.frees) {  // (never equal while uncounted: remembered())
      for (; g != g_code_end; ++g)
        if (load<const void*>(g->code + o_ob_type) != code_type || ident(fo, g->code) != g->ident) goto guards_slow;
    }
    for (g = g_code_end; g != g_end; ++g)
      if (g->code && load<const void*>(g->code + o_ob_type) == code_type) goto guards_slow;
    *stop_at = at;
    *hit = true;
    return k;
  }
guards_slow:
  *hit = false;
  // The first failing guard among the frames verified so far ends the prefix there.
  for (g = c.g; g != g_end; ++g) {
    if (g->index < k && !holds(g)) {
      k = g->index;
      at = k == 0 ? frame : reinterpret_cast<const char*>(c.w[k - 1].next);
    }
  }
  *stop_at = at;
  return k;
}
// Whether chain c may be checked by instruction now: all its frames allow it, and no code object was freed since its
// guards held (never on 3.10, whose frames never allow it; never while frees are uncounted: remembered()).
inline bool by_instr_now(const Chain& c, uint64_t frees) { return c.by_instr && frees == c.frees; }

// Whether every visited frame of a chain checked by instruction (by_instr_now) still has the link and instruction
// pointer the walk read: then it is a hit ("Two shortcuts" above). No prefix, no stop: a miss is checked again in
// full by verified_prefix_t, which finds the prefix to walk on from.
__attribute__((always_inline)) inline bool holds_by_instr(const Reader& rd, const Chain& c, const char* at) {
  const int32_t o_instr = rd.o_instr, o_previous = rd.o_previous;
  const ChainWords* f = c.w;
  const ChainWords* const end = f + c.n_visited;
  const ChainWords* const pairs_end = f + (c.n_visited & ~1u);
  // Two frames a round; each frame read only after the link to it held. Two compares a frame, each against the
  // cached word in memory (a load and a compare-with-memory each, no copy of the link).
  for (; f != pairs_end; f += 2) {
    const uintptr_t link = load<uintptr_t>(at + o_previous);
    if (link != f->next || load<uintptr_t>(at + o_instr) != f->instr) return false;
    at = reinterpret_cast<const char*>(link);
    const uintptr_t link2 = load<uintptr_t>(at + o_previous);
    if (link2 != f[1].next || load<uintptr_t>(at + o_instr) != f[1].instr) return false;
    at = reinterpret_cast<const char*>(link2);
  }
  return f == end || (load<uintptr_t>(at + o_previous) == f->next && load<uintptr_t>(at + o_instr) == f->instr);
}

inline int verified_prefix(const Reader& rd, const Chain& c, const char* frame, uint64_t frees, const char** stop_at,
                           bool* hit, PyChainStats* stats) {
  if (by_instr_now(c, frees) && holds_by_instr(rd, c, frame)) {
    *stop_at = nullptr;  // (a hit: not walked on from)
    *hit = true;
    return c.n_visited;
  }
  ++stats->word_checks;
  return rd.objects ? verified_prefix_t<true>(rd, c, frame, frees, stop_at, hit)
                    : verified_prefix_t<false>(rd, c, frame, frees, stop_at, hit);
}

inline uint32_t chain_ways(const ChainCache* cc, uint32_t set, uint32_t tag) {
  const __m128i t = _mm_set1_epi32(static_cast<int>(tag));
  uint32_t m = 0;
  for (int q = 0; q < kChainWays / 4; ++q) {
    const __m128i w = _mm_load_si128(reinterpret_cast<const __m128i*>(&cc->tags[set][4 * q]));
    m |= static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(w, t)))) << (4 * q);
  }
  return m;
}

}  // namespace

namespace {

// Serves chain `index` (every frame verified): its keys, memo and token, and it becomes the last chain served.
// Its code objects' guards held at `frees` (checked, or skipped as unchanged since they last held).
// `predicted`: it is the last chain's successor already.
inline int serve_chain(ChainCache* cc, uint32_t index, uint64_t frees, PyFrameKey* out, PyCapture* how,
                       bool predicted = false) {
  Chain& c = cc->c[index];
  c.frees = remembered(frees);
  ++cc->stats.hits;
  cc->used[index / kChainWays] = static_cast<uint16_t>(cc->used[index / kChainWays] | (1u << (index % kChainWays)));
  if (!predicted && cc->last) cc->c[cc->last - 1].succ = index + 1;
  cc->last = index + 1;
  how->hit = true;
  how->truncated = c.truncated;
  how->memo = &c.memo;
  how->token = c.token;
  if (how->borrow)
    how->frames = c.keys;
  else
    memcpy(out, c.keys, sizeof(PyFrameKey) * c.n_out);
  return static_cast<int>(c.n_out);
}

// What follows when the chain tried first is not the live one: the chains found by the innermost frame's words,
// else a walk from the first frame that differs into a new chain. Out of line: the launch path's hit stays small.
[[gnu::noinline]] int capture_chain_miss(const Reader& rd, ChainCache* cc, const char* head, uint64_t frees,
                                         PyFrameKey* out, int max, PyCapture* how) {
  check_dealloc_slot();
  frees = code_frees_now();  // read again (before any code object below): uncounted from now on if the slot changed
  const char* stop_at = nullptr;
  const uint32_t tag = chain_tag(reinterpret_cast<uintptr_t>(head), rd.code_word(head), rd.instr(head), max);
  const uint32_t set = tag & (kChainSets - 1);
  const Chain* best = nullptr;
  int best_n = 0;
  const char* best_stop = nullptr;
  for (uint32_t m = chain_ways(cc, set, tag); m; m &= m - 1) {
    const uint32_t way = static_cast<uint32_t>(__builtin_ctz(m));
    Chain& c = cc->c[set * kChainWays + way];
    if (c.max != max) continue;
    bool hit;
    const int k = verified_prefix(rd, c, head, frees, &stop_at, &hit, &cc->stats);
    if (hit) return serve_chain(cc, set * kChainWays + way, frees, out, how);
    if (k > best_n) {
      best = &c;
      best_n = k;
      best_stop = stop_at;
    }
  }
  // A miss: walk on from the first frame that differs (from the head when none matched), into the scratch chain.
  Chain& s = cc->scratch;
  int n = 0;
  const char* from = head;
  if (best) {
    ++cc->stats.partial;
    memcpy(s.w, best->w, sizeof(ChainWords) * static_cast<size_t>(best_n));
    memcpy(s.m, best->m, sizeof(ChainMeta) * static_cast<size_t>(best_n));
    n = best->m[best_n - 1].out_before + (best->m[best_n - 1].kind == kShown ? 1 : 0);
    memcpy(out, best->keys, sizeof(PyFrameKey) * static_cast<size_t>(n));
    from = best_stop;
  }
  n = walk_chain(rd, from, best ? best_n : 0, n, out, max, &s, &how->truncated);
  if (s.n_visited == 0xffff || s.n_visited == 0) {
    ++cc->stats.plain;
    return n;
  }
  ++cc->stats.fills;
  // Into a way not recently used.
  uint32_t free = ~static_cast<uint32_t>(cc->used[set]) & ((1u << kChainWays) - 1);
  if (!free) {
    cc->used[set] = 0;
    free = (1u << kChainWays) - 1;
  }
  const int way = __builtin_ctz(free);
  Chain& c = cc->c[set * kChainWays + way];
  cc->tags[set][way] = 0;
  c.token = ++cc->tokens;
  c.frees = remembered(frees);  // read before the walk read the code objects
  c.memo = PyMemo{};
  c.head = reinterpret_cast<uintptr_t>(head);
  c.max = s.max;
  c.n_visited = s.n_visited;
  c.n_out = s.n_out;
  c.ends_null = s.ends_null;
  c.truncated = s.truncated;
  memcpy(c.w, s.w, sizeof(ChainWords) * s.n_visited);
  memcpy(c.m, s.m, sizeof(ChainMeta) * s.n_visited);
  set_guards(rd, &c);
  memcpy(c.keys, out, sizeof(PyFrameKey) * static_cast<size_t>(n));
  cc->tags[set][way] = tag;
  cc->used[set] = static_cast<uint16_t>(cc->used[set] | (1u << way));
  c.succ = 0;
  if (cc->last) cc->c[cc->last - 1].succ = static_cast<uint32_t>(set * kChainWays + way) + 1;
  cc->last = static_cast<uint32_t>(set * kChainWays + way) + 1;
  how->memo = &c.memo;
  how->token = c.token;
  return n;
}


}  // namespace

int capture_python_frames_cached(PyFrameKey* out, int max, PyCapture* how) noexcept {
  how->hit = false;
  how->truncated = false;
  how->memo = nullptr;
  how->token = 0;
  how->frames = out;
  if (!out || max <= 0 || !ready()) return 0;
  const Runtime& R = g_rt;
  const auto* ts = static_cast<const char*>(R.this_thread_state());
  if (!ts) return 0;
  ChainCache* cc = ThreadBlock<ChainCache>::get();
  if (!cc) return capture_python_frames(out, max, &how->truncated);
  const Reader& rd = g_reader;
  const char* head = head_frame(R, ts);
  if (!head) return 0;
  const uint64_t frees = code_frees_now();  // before any code object's words are read
  // First the chain that followed the last one served, the last time it was served: the same stack again (launches
  // from one C call, a loop), or sites called in a repeating order (an op-by-op forward pass), without the tag and
  // the set's scan. Any chain verified against the live frames is exact; a cleared cache has no successors.
  if (const uint32_t pred = cc->last ? cc->c[cc->last - 1].succ : 0) {
    const Chain& c = cc->c[pred - 1];
    if (c.max == max) {
      bool hit;
      if (by_instr_now(c, frees)) {
        hit = holds_by_instr(rd, c, head);  // inline, and no full check after a miss: it could not hit either
      } else {
        const char* stop_at;
        verified_prefix(rd, c, head, frees, &stop_at, &hit, &cc->stats);
      }
      if (hit) {
        ++cc->stats.predicted;
        return serve_chain(cc, pred - 1, frees, out, how, true);
      }
    }
  }
  return capture_chain_miss(rd, cc, head, frees, out, max, how);
}

void python_chain_cache_clear() noexcept {
  ChainCache* cc = ThreadBlock<ChainCache>::peek();
  if (!cc) return;
  memset(cc->tags, 0, sizeof cc->tags);
  memset(cc->used, 0, sizeof cc->used);
  cc->last = 0;
  for (Chain& c : cc->c) c.succ = 0;
}

PyChainStats python_chain_stats() noexcept {
  const ChainCache* cc = ThreadBlock<ChainCache>::peek();
  return cc ? cc->stats : PyChainStats{};
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
