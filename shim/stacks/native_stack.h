// Native call stacks of the calling thread, through libunwind loaded at run time,
// with a per-thread cache of verified stacks in front of it.
//
// Contract: `native_stack_init()` dlopens libunwind.so.8 with RTLD_LOCAL (never a
// link dependency: a linked libunwind would rebind the host's C++ exception
// unwinding) and turns on its per-thread cache; idempotent and thread-safe, call
// it during warm-up. `capture_native_stack` is then lock-free and returns return
// addresses, innermost first, with cdsa's own frames removed. Without libunwind
// it returns 0 and one notice is printed.
//
// Repeated stacks (the common case: a training loop launches from the same few
// hundred sites) are not unwound again. The first unwind of a stack records, for
// every frame, the stack slot its return address was read from (and the slot of a
// saved frame pointer where a frame's CFA is frame-pointer based); a later capture
// from the same stack pointer (and the same return address in the slot of the first
// recorded frame: 512 stacks per thread, sites in turn at one depth do not evict
// each other) re-reads exactly those slots and returns the cached
// stack only if every slot still holds the value the unwinder read. The unwind is
// a function of the registers at the capture point and of those slots, so a hit is
// the stack libunwind would return (see native_stack.cc for the argument and the
// frames that are never cached: signal frames, code without unwind info such as
// JIT code, stack-realigning prologues). A library unloaded mid-run drops every
// cached stack. Slots are read only inside the thread's own stack, between the
// current stack pointer and the top taken from pthread_getattr_np once per thread.
#pragma once

#include <cstdint>

namespace cdsa {

bool native_stack_init() noexcept;
// Full stack, up to `max` frames.
int capture_native_stack(uintptr_t* out, int max) noexcept;

// Kept with a cached stack for the caller's own memo of what it derived from this exact stack (the recorder:
// the token of the Python chain it was interned with, and the stack's StackMemo, shim/record/recorder.h: a
// stack id is kept across launches only as a memo). Zero after every refill.
struct NativeMemo {  // no initialisers: kept in memory that starts zeroed
  uint64_t other;
  uint64_t stack;  // a StackMemo; 0: none
};
struct NativeCapture {
  bool stop_at_interpreter = false;  // stop after the first frame inside the interpreter range
  bool borrow = false;               // a hit leaves `out` alone and points `frames` at the cached copy
  bool hit = false;                  // out: served from the verified cache
  // out: the frames (`out`, or with `borrow` on a hit the cache's copy, valid until this thread's next capture)
  const uintptr_t* frames = nullptr;
  // out: this cached stack's memo; nullptr when the stack is not cached.
  NativeMemo* memo = nullptr;
  // out: names this cached stack in this thread (a new number at every fill; 0 when not cached).
  uint64_t token = 0;
};
int capture_native_stack(uintptr_t* out, int max, NativeCapture* how) noexcept;

// The interpreter's code: the loaded object holding `addr` (libpython, or the executable
// when the interpreter is linked into it). False if `addr` is in no loaded object.
bool set_interpreter_range_from(const void* addr) noexcept;
bool pc_in_interpreter(uintptr_t pc) noexcept;

// Finds libcdsa.so's own address range (constructor; cheap).
void self_range_init() noexcept;
// True if `pc` lies inside libcdsa.so itself.
bool pc_in_cdsa(uintptr_t pc) noexcept;

// The uncached path (libunwind's unw_backtrace), and emptying this thread's cache: for tests and benchmarks.
int capture_native_stack_uncached(uintptr_t* out, int max) noexcept;
void native_cache_clear() noexcept;

// True where cdsa's dlclose counts unloads (preloaded); false where glibc's counter is read per capture.
bool native_unloads_tracked() noexcept;
// The dlclose hook's part (shim/intercept/libc_hooks.cc), around the next dlclose: begin before it (no stack cached
// before it is served while it may be unmapping code, and none unwound meanwhile is cached; returns glibc's count
// of unloads), end after it with what begin returned (every cached stack is dropped if it unloaded something).
uint64_t native_unload_begin() noexcept;
void native_unload_end(uint64_t before) noexcept;

// Counters of the verified cache, for tests and benchmarks (this thread only).
struct NativeCacheStats {
  uint64_t hits = 0, fills = 0, uncacheable = 0, plain = 0;
};
NativeCacheStats native_cache_stats() noexcept;
// Resident bytes of one thread's cache once used.
uint64_t native_cache_bytes_per_thread() noexcept;

}  // namespace cdsa
