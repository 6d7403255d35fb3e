// The CPython walker's parts that its two files share (python_stack.cc, the walker; python_chain_cache.cc, the
// verified chain cache): the interpreter's functions and layout found at detection, the readiness test, and the
// code-object fingerprint, inline here so that the cache's hit path calls none of them.
// Internal to shim/stacks/: the walker's own files include it, nothing else.
// Contract: g_rt is written once, before g_state says Ready, and only read after; ready() is one acquire load then.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "shim/stacks/python_stack.h"

#pragma GCC visibility push(hidden)
namespace cdsa::pystack {

enum : int { kUninit = -1 };

struct Runtime {
  PyLayout L;
  void* (*this_thread_state)(void) = nullptr;    // PyGILState_GetThisThreadState
  int (*addr2line)(const void*, int) = nullptr;  // PyCode_Addr2Line
  const void* code_type = nullptr;               // &PyCode_Type
  const void* str_type = nullptr;                // &PyUnicode_Type
  const void* bytes_type = nullptr;              // &PyBytes_Type (3.10: co_code)
};

// Filled once by the detection (under its mutex, before g_state says Ready), read-only from then on.
extern Runtime g_rt;
extern std::atomic<int> g_state;

constexpr int kMaxWalk = 1 << 20;  // frames visited per capture (cycle guard)

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

inline bool ready() noexcept {
  const int s = g_state.load(std::memory_order_acquire);
  if (s == int(PyWalkerState::Ready)) return true;
  if (s != kUninit) return false;
  return python_walker_init() == PyWalkerState::Ready;
}

// The chain cache's reader of frames (python_chain_cache.cc), made from the final g_rt by the detection.
void make_reader(const Runtime& R);

}  // namespace cdsa::pystack
#pragma GCC visibility pop
