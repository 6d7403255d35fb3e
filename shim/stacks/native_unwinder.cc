// libunwind loaded at run time for the native stack (native_unwinder_internal.h), and the unloads it is told of.
#include "shim/stacks/native_stack.h"
#include "shim/stacks/native_unwinder_internal.h"

#include <execinfo.h>
#include <libunwind.h>
#include <link.h>
#include <climits>
#include <mutex>

#include "shim/common/driver.h"
#include "shim/common/log.h"
#include "symbolizer/bundled_dlopen.h"

// The buffers cdsa hands libunwind, checked against its own header for this architecture (only the types are
// used: libunwind is still loaded with dlopen). A cursor buffer smaller than unw_cursor_t would be overrun by
// init_local (on aarch64 140 words, x86-64's size, fell 880 bytes short of its 250).
static_assert(sizeof(cdsa::native_internal::UnwCursor) >= sizeof(unw_cursor_t), "UnwCursor: smaller than unw_cursor_t");
static_assert(alignof(cdsa::native_internal::UnwCursor) >= alignof(unw_cursor_t), "UnwCursor: less aligned");
static_assert(sizeof(cdsa::native_internal::UnwProcInfo) >= sizeof(unw_proc_info_t), "UnwProcInfo: too small");
static_assert(offsetof(unw_proc_info_t, end_ip) == offsetof(cdsa::native_internal::UnwProcInfo, end_ip));
static_assert(sizeof(cdsa::native_internal::UnwSaveLoc) >= sizeof(unw_save_loc_t), "UnwSaveLoc: too small");
static_assert(offsetof(unw_save_loc_t, u) == offsetof(cdsa::native_internal::UnwSaveLoc, addr));
static_assert(UNW_SLT_MEMORY == cdsa::native_internal::kSlotMemory);
#if defined(__aarch64__)
static_assert(UNW_AARCH64_X29 == cdsa::arch::kUnwFp && UNW_AARCH64_SP == cdsa::arch::kUnwSp &&
              UNW_REG_IP == cdsa::arch::kUnwPc && UNW_AARCH64_X30 == cdsa::arch::kUnwReturnSlot);
// unw_tdep_context_t is a prefix of glibc's ucontext_t there: the registers at the same offsets.
static_assert(offsetof(unw_tdep_context_t, uc_mcontext.regs) == offsetof(ucontext_t, uc_mcontext.regs));
static_assert(offsetof(unw_tdep_context_t, uc_mcontext.pc) == offsetof(ucontext_t, uc_mcontext.pc));
CDSA_ARCH_DEFINE_CAPTURE_CONTEXT();
#else
static_assert(UNW_X86_64_RBP == cdsa::arch::kUnwFp && UNW_X86_64_RSP == cdsa::arch::kUnwSp &&
              UNW_X86_64_RIP == cdsa::arch::kUnwPc && UNW_X86_64_RIP == cdsa::arch::kUnwReturnSlot);
static_assert(sizeof(unw_context_t) == sizeof(ucontext_t));
#endif

namespace cdsa {
namespace native_internal {
std::atomic<BacktraceFn> g_backtrace{nullptr};
Walker g_walker;
std::atomic<bool> g_walker_ready{false};
std::atomic<uint64_t> g_unloads{0};
std::atomic<bool> g_unloads_hooked{false};
}  // namespace native_internal

namespace {
using namespace native_internal;

using SetCachingFn = int (*)(void*, int);
std::once_flag g_once;

// Loads the step-by-step API next to unw_backtrace; without any of it, stacks are not cached.
void load_walker(void* h) {
  Walker w;
  if constexpr (arch::kUnwGetcontextExported)
    w.getcontext = reinterpret_cast<decltype(w.getcontext)>(dlsym(h, CDSA_UNW_GENERIC("getcontext")));
  else
    w.getcontext = &cdsa_capture_context;
  w.init_local = reinterpret_cast<decltype(w.init_local)>(dlsym(h, CDSA_UNW_LOCAL("init_local")));
  w.step = reinterpret_cast<decltype(w.step)>(dlsym(h, CDSA_UNW_LOCAL("step")));
  w.get_reg = reinterpret_cast<decltype(w.get_reg)>(dlsym(h, CDSA_UNW_LOCAL("get_reg")));
  w.get_save_loc = reinterpret_cast<decltype(w.get_save_loc)>(dlsym(h, CDSA_UNW_LOCAL("get_save_loc")));
  w.is_signal_frame = reinterpret_cast<decltype(w.is_signal_frame)>(dlsym(h, CDSA_UNW_LOCAL("is_signal_frame")));
  w.get_proc_info = reinterpret_cast<decltype(w.get_proc_info)>(dlsym(h, CDSA_UNW_LOCAL("get_proc_info")));
  if (!w.getcontext || !w.init_local || !w.step || !w.get_reg || !w.get_save_loc || !w.is_signal_frame ||
      !w.get_proc_info)
    return;
  g_walker = w;
  g_walker_ready.store(true, std::memory_order_release);
}

void note_dlclose_hook() {
  // Ours only if the program's dlclose resolves to it (preloaded, or linked into a test).
  g_unloads_hooked.store(real_dlsym()(RTLD_DEFAULT, "dlclose") == reinterpret_cast<void*>(&::dlclose),
                         std::memory_order_release);
}

void init_once() {
#if defined(__SANITIZE_THREAD__)
  // libunwind frees its per-thread trace cache from a TSD destructor that runs after ThreadSanitizer has torn
  // down the exiting thread, which crashes TSan. TSan builds (tests only) unwind with glibc's backtrace().
  g_backtrace.store(&backtrace, std::memory_order_release);
  return;
#endif
  // The copy shipped next to libcdsa.so (the wheel's cdsa/lib/vendor/) first, then the system's.
  char used[PATH_MAX], why[1024];
  void* h = bundled::dlopen_bundled_first("libunwind.so.8", reinterpret_cast<const void*>(&init_once), used,
                                          sizeof used, why, sizeof why);
  if (!h) {
    log_line("no usable libunwind (%s): native frames will not be recorded, Python frames only", why);
    return;
  }
  auto bt = reinterpret_cast<BacktraceFn>(dlsym(h, "unw_backtrace"));
  auto set_caching = reinterpret_cast<SetCachingFn>(dlsym(h, CDSA_UNW_LOCAL("set_caching_policy")));
  auto* local_as = reinterpret_cast<void**>(dlsym(h, CDSA_UNW_LOCAL("local_addr_space")));
  if (!bt) {
    log_line("%s has no unw_backtrace: native frames will not be recorded, Python frames only", used);
    return;
  }
  if (set_caching && local_as) set_caching(*local_as, 2 /* UNW_CACHE_PER_THREAD */);
  load_walker(h);
  note_dlclose_hook();
  g_backtrace.store(bt, std::memory_order_release);
}

}  // namespace

namespace native_internal {
void load_unwinder() { std::call_once(g_once, init_once); }
}  // namespace native_internal

bool native_unloads_tracked() noexcept { return g_unloads_hooked.load(std::memory_order_acquire); }

uint64_t native_unload_begin() noexcept {
  g_unloads.fetch_add(kDlcloseInProgress, std::memory_order_acq_rel);
  return glibc_unloads();
}

void native_unload_end(uint64_t before) noexcept {
  const uint64_t unloaded = glibc_unloads() != before ? kUnloadGeneration : 0;
  g_unloads.fetch_add(unloaded - kDlcloseInProgress, std::memory_order_acq_rel);
}
}  // namespace cdsa

