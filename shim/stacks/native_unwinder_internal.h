// libunwind as the native stack's cache (native_stack.cc) drives it, and the count of unloaded libraries that keeps
// its cached stacks honest: loaded and kept by native_unwinder.cc, read on every capture (inline here: the capture
// calls nothing for them).
// Internal to shim/stacks/: the native walker's own files include it, nothing else.
// Contract: load_unwinder is thread-safe and runs once; unload_count is lock-free (one or two loads, or one
// dl_iterate_phdr where cdsa's dlclose is not the program's).
#pragma once

#include <dlfcn.h>
#include <link.h>
#include <ucontext.h>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/arch.h"

#pragma GCC visibility push(hidden)
namespace cdsa::native_internal {

using BacktraceFn = int (*)(void**, int);
extern std::atomic<BacktraceFn> g_backtrace;  // unw_backtrace (TSan builds: glibc's backtrace); null: none

// ---- the step-by-step unwinder behind the verified cache (libunwind's local API, no headers needed) ----
// unw_cursor_t's size is the architecture's (base/arch.h: 127 words on x86-64, 250 on aarch64; native_unwinder.cc
// checks the buffer against libunwind's own header); unw_context_t is a ucontext_t, or a prefix of one (aarch64);
// register numbers are the DWARF ones.
constexpr int kUnwFp = arch::kUnwFp, kUnwSp = arch::kUnwSp, kUnwPc = arch::kUnwPc;
constexpr int kUnwReturnSlot = arch::kUnwReturnSlot;
constexpr int kSlotMemory = 1;  // UNW_SLT_MEMORY
struct alignas(16) UnwCursor {
  uint64_t w[arch::kUnwCursorWords];
};
struct UnwSaveLoc {
  int type;
  uint64_t addr;  // union { addr; regnum }
  uint64_t extra[2];
};
struct UnwProcInfo {
  uint64_t start_ip, end_ip;
  uint64_t rest[14];
};
struct Walker {
  int (*getcontext)(ucontext_t*) = nullptr;
  int (*init_local)(UnwCursor*, ucontext_t*) = nullptr;
  int (*step)(UnwCursor*) = nullptr;
  int (*get_reg)(UnwCursor*, int, uint64_t*) = nullptr;
  int (*get_save_loc)(UnwCursor*, int, UnwSaveLoc*) = nullptr;
  int (*is_signal_frame)(UnwCursor*) = nullptr;
  int (*get_proc_info)(UnwCursor*, UnwProcInfo*) = nullptr;
};
extern Walker g_walker;
extern std::atomic<bool> g_walker_ready;

// Loads libunwind once (thread-safe): g_backtrace, and g_walker where its step-by-step API is there.
void load_unwinder();

// Unloads so far: a library unloaded mid-run may be replaced by another at the same addresses, whose unwind
// rules differ; every cached stack from before is dropped. Where cdsa is preloaded, its dlclose keeps the
// count for an atomic load per capture (native_unload_begin/end, native_stack.h); where it was dlopen'ed (CUDA_INJECTION64_PATH) the program's dlclose is
// not ours, and glibc's own counter is read through dl_iterate_phdr (its first callback stops the walk).
//
// cdsa's count: a generation, bumped only when glibc's counter says a dlclose unloaded something (most unload
// nothing: a library still referenced, or cdsa's own dlopen(RTLD_NOLOAD) + dlclose), plus, in the top bits, the
// dlcloses in progress: no stack cached before a dlclose is served while it may be unmapping code, and none
// unwound meanwhile is cached (a capture with those bits set is not kept). glibc's count never reaches them.
constexpr uint64_t kUnloadGeneration = 1, kDlcloseInProgress = uint64_t{1} << 48;
extern std::atomic<uint64_t> g_unloads;
extern std::atomic<bool> g_unloads_hooked;
inline int read_subs(dl_phdr_info* info, size_t size, void* data) {
  uint64_t subs = 0;
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) subs = info->dlpi_subs;
  *static_cast<uint64_t*>(data) = subs;
  return 1;
}
// glibc's count of objects unloaded so far (dlpi_subs: the same in every object's entry).
inline uint64_t glibc_unloads() {
  uint64_t subs = 0;
  dl_iterate_phdr(read_subs, &subs);
  return subs;
}
inline uint64_t unload_count() {
  if (g_unloads_hooked.load(std::memory_order_relaxed)) return g_unloads.load(std::memory_order_acquire);
  return glibc_unloads();
}

}  // namespace cdsa::native_internal
#pragma GCC visibility pop
