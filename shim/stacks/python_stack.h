// CPython frame walker for cdsa.
//
// Reads the *calling* thread's CPython interpreter frames directly from
// memory, without the GIL and without linking libpython: every CPython symbol
// is looked up with dlsym(RTLD_DEFAULT, ...) the first time the walker is
// initialised. Meant to run at every CUDA kernel launch, so it is cheap
// (tens of nanoseconds for ~20 frames) and does nothing that could deadlock or
// disturb the interpreter.
//
// Supported interpreters (x86-64 Linux, default GIL build, release or debug
// build without Py_TRACE_REFS), layouts in python_layout.h:
//   * CPython 3.10: its own frame objects (tstate->frame, f_back, f_code,
//     f_lasti); function names are co_name (3.10 has no co_qualname).
//   * CPython 3.11, 3.12: struct offsets hard-coded (verified against the
//     installed headers by tests/unit/python_stack).
//   * CPython 3.13, 3.14: offsets read at init from _PyRuntime.debug_offsets
//     (cookie "xdebugpy", version checked), plus a few per-version constants
//     the debug offsets do not publish.
// Anything else (3.9 and older, 3.15+, free-threaded builds, a layout that
// fails the init-time sanity checks) makes the walker Unsupported: captures
// return 0 frames and python_walker_description() says why. It never crashes
// for an unknown version: nothing interpreter-specific is dereferenced unless
// the version is one of the above and the sanity checks passed.
//
// Contract (all functions):
//   * Thread-safe. python_walker_init() is idempotent; the first call does the
//     detection (dlsym, which may take the dynamic loader's lock and allocate)
//     under a one-time mutex; every later call is a single atomic load.
//     Call it once early (e.g. when the shim loads or at the first launch) so
//     that later captures never reach the detection path.
//   * The init puts one counting wrapper into PyCode_Type's tp_dealloc slot
//     (shim/stacks/code_frees.h, the contract of that one write)
//     (when the type object is writable data, as in every CPython build
//     seen): it adds one to a counter and calls the interpreter's own
//     function, which lets the chain cache below skip re-reading code
//     objects while none was freed. Nothing else in the interpreter is
//     written, ever. Should another layer later put its own function in
//     the slot, the count is no longer trusted (checked at every chain
//     miss): the cache then reads the code objects again at every check.
//   * After a successful init, capture_python_frames(), resolve_python_frame()
//     and python_code_check() never take the GIL, never allocate, never lock,
//     never touch a reference count, never call into the interpreter except
//     PyGILState_GetThisThreadState() (a TLS read) and PyCode_Addr2Line()
//     (a pure decode of co_linetable, checked to allocate nothing in
//     3.10-3.14).
//   * Not async-signal-safe (not required): PyGILState_GetThisThreadState() is
//     pthread_getspecific(), which is fine in practice but not guaranteed.
//   * Only the calling thread's own frames are read. That thread is running
//     native code (us), so its frame chain cannot change under us even when
//     another thread holds the GIL. Never pass a key captured by one thread to
//     resolve_python_frame() on another thread, or after the native call in
//     which it was captured has returned to Python: the code object may be
//     gone (see PyFrameKey).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/stacks/python_frame_key.h"
#include "shim/stacks/python_layout.h"

namespace cdsa {

// The CPython minor versions (3.x) whose frames the walker reads. `cdsa doctor` reports against the same range.
constexpr int kPythonMinMinor = 10;
constexpr int kPythonMaxMinor = 14;

enum class PyWalkerState { NoPython, Ready, Unsupported };

// Lazily detects the running CPython (dlsym(RTLD_DEFAULT, ...): no link to
// libpython) and picks the layout. Idempotent, thread-safe, cheap after the
// first call. The result is final for the life of the process: a libpython
// dlopen()ed after the first call (embedding) is not picked up, and neither is
// one loaded RTLD_LOCAL (its symbols are invisible to RTLD_DEFAULT).
PyWalkerState python_walker_init() noexcept;

// Human-readable outcome of python_walker_init() (calls it if needed), e.g.
//   "CPython 3.11.7 (built-in layout)"
//   "CPython 3.13.0 (debug offsets)"
//   "CPython 3.15.0a1: unknown layout, Python frames disabled"
//   "no Python interpreter in this process"
// Static storage; valid for the life of the process.
const char* python_walker_description() noexcept;

// Captures the CALLING thread's Python frames, innermost first, up to max.
// Frames CPython itself hides from tracebacks (incomplete frames, C-stack
// entry/trampoline frames, frames whose executable is not a code object) are
// skipped, so the result matches traceback.extract_stack() taken at the same
// point. Never takes the GIL, never allocates, never locks, never touches a
// refcount (once initialised; the first call initialises if nobody did).
// Returns the number of frames written, 0 when the thread has no Python thread
// state, when out is null or max <= 0, or when the walker is not Ready.
// *truncated (optional) is set to true when more than max frames existed.
int capture_python_frames(PyFrameKey* out, int max) noexcept;
int capture_python_frames(PyFrameKey* out, int max, bool* truncated) noexcept;

// The same capture through this thread's cache of verified frame chains. A repeated Python stack is not walked
// again: the thread remembers its recent chains (for every frame the walk visited, shown or hidden: its code /
// executable word, its instruction pointer, its owner and its link, and for each code object the walk read, the
// identity words its fingerprint is made of) and the next capture compares those words from the innermost frame
// out, following the live links; where a frame differs, the walk goes on from that frame only. A hit is exactly
// what capture_python_frames returns there: the walk's result is a function of the words compared and of the code
// objects' immutable fields, which the identity words guard (a code object freed and another allocated at the same
// address: an edited notebook cell). The chain first tried is the one that followed the last chain served, the last
// time (the same stack again, or sites in a repeating order); then the chains found by the innermost frame's words.
// While no code object was freed since a chain's guards last held (counted through PyCode_Type's tp_dealloc), the
// guards hold unread, and on 3.11+ a chain of frames that the walk showed from their first traceable instruction on
// (and entry frames) is verified by its frames' links and instruction pointers alone (python_chain_cache.cc says why).
// 512 chains of up to 48 visited frames per thread (deeper chains are walked plainly). Same guarantees as
// capture_python_frames otherwise.
struct PyMemo {  // kept with a cached chain for the caller (see NativeMemo); no initialisers
  uint64_t other;
  uint64_t stack;  // a StackMemo (shim/record/recorder.h); 0: none
};
struct PyCapture {
  bool borrow = false;  // on a hit, leave `out` alone and point `frames` at the cache's copy
  bool hit = false;     // out: served from the cache (every frame verified)
  bool truncated = false;            // out: more than max frames existed
  const PyFrameKey* frames = nullptr;  // out: the keys; with `borrow`, valid until this thread's next capture
  PyMemo* memo = nullptr;              // out: this chain's memo, nullptr when not cached
  uint64_t token = 0;                  // out: names this cached chain in this thread (new at every fill), 0 if not
};
int capture_python_frames_cached(PyFrameKey* out, int max, PyCapture* how) noexcept;
// Empties this thread's chain cache (tests, benchmarks).
void python_chain_cache_clear() noexcept;
struct PyChainStats {
  uint64_t hits, partial, fills, plain;
  uint64_t predicted;  // of the hits: served by the chain that followed the last one served
  uint64_t word_checks;  // chain checks that compared the frames' words and the code objects' guards (the others:
                         // by instruction and link alone, while no code object was freed)
};
PyChainStats python_chain_stats() noexcept;  // this thread's

// Resolves a frame captured by this thread in the same native call (so the
// code object is alive): file name (co_filename), qualified function name
// (co_qualname) and line number (-1 if the instruction has no line).
// Writes NUL-terminated UTF-8 into the caller's buffers, truncated safely at a
// code point boundary (lone surrogates become U+FFFD); a buffer may be null
// when its capacity is 0, and line may be null. No GIL, no allocation.
// Returns false (buffers set to "" when capacity allows, *line = 0) if the
// walker is not Ready, if key.code does not look like a code object of the
// expected layout (wrong type, fingerprint differs from key.code_check, offset
// outside the bytecode).
bool resolve_python_frame(const PyFrameKey& key, char* file, size_t file_cap, char* function, size_t function_cap,
                          int* line) noexcept;

// The fingerprint of a code object's immutable identity (co_firstlineno and
// the addresses of co_filename, co_qualname and co_linetable), recomputed. Use it to validate an intern key keyed by
// the code object's address: a recycled address gives a different value with overwhelming probability. code must be
// alive (e.g. just captured by this thread). Returns 0 if the walker is not Ready or code is not a code object.
uint32_t python_code_check(const void* code) noexcept;

// ---------------------------------------------------------------------------
// Diagnostics (the per-version layouts themselves: python_layout.h).
namespace pystack {

// The layout in use after a successful init, or nullptr.
const PyLayout* active_layout() noexcept;

// Encodes code points as UTF-8 into out (cap bytes incl. the NUL), stopping at
// a code point boundary when full; surrogates become U+FFFD. Returns the
// number of bytes written (without the NUL). kind is 1, 2 or 4.
size_t encode_utf8(const void* data, int kind, size_t length, char* out, size_t cap) noexcept;

}  // namespace pystack
}  // namespace cdsa
