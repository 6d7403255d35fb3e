// libunwind loaded at run time for the native stack (native_unwinder_internal.h), and the unloads it is told of.
#include "shim/stacks/native_stack.h"
#include "shim/stacks/native_unwinder_internal.h"

#include <execinfo.h>
#include <link.h>
#include <climits>
#include <mutex>

#include "shim/common/driver.h"
#include "shim/common/log.h"
#include "symbolizer/bundled_dlopen.h"

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
  w.getcontext = reinterpret_cast<decltype(w.getcontext)>(dlsym(h, "_Ux86_64_getcontext"));
  w.init_local = reinterpret_cast<decltype(w.init_local)>(dlsym(h, "_ULx86_64_init_local"));
  w.step = reinterpret_cast<decltype(w.step)>(dlsym(h, "_ULx86_64_step"));
  w.get_reg = reinterpret_cast<decltype(w.get_reg)>(dlsym(h, "_ULx86_64_get_reg"));
  w.get_save_loc = reinterpret_cast<decltype(w.get_save_loc)>(dlsym(h, "_ULx86_64_get_save_loc"));
  w.is_signal_frame = reinterpret_cast<decltype(w.is_signal_frame)>(dlsym(h, "_ULx86_64_is_signal_frame"));
  w.get_proc_info = reinterpret_cast<decltype(w.get_proc_info)>(dlsym(h, "_ULx86_64_get_proc_info"));
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
  auto set_caching = reinterpret_cast<SetCachingFn>(dlsym(h, "_ULx86_64_set_caching_policy"));
  auto* local_as = reinterpret_cast<void**>(dlsym(h, "_ULx86_64_local_addr_space"));
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

