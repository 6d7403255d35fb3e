#include "shim/native_stack.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <atomic>
#include <mutex>

#include "shim/log.h"
#include "symbolizer/bundled_dlopen.h"

namespace cdsa {
namespace {

using BacktraceFn = int (*)(void**, int);
using SetCachingFn = int (*)(void*, int);

std::atomic<BacktraceFn> g_backtrace{nullptr};
std::once_flag g_once;
uintptr_t g_self_lo = 0, g_self_hi = 0;

int find_self(dl_phdr_info* info, size_t, void* data) {
  auto self = reinterpret_cast<uintptr_t>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (self >= lo && self < hi) {
      // The whole object: from its lowest to its highest PT_LOAD.
      uintptr_t olo = UINTPTR_MAX, ohi = 0;
      for (int j = 0; j < info->dlpi_phnum; ++j) {
        const auto& p = info->dlpi_phdr[j];
        if (p.p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + p.p_vaddr;
        if (a < olo) olo = a;
        if (a + p.p_memsz > ohi) ohi = a + p.p_memsz;
      }
      g_self_lo = olo;
      g_self_hi = ohi;
      return 1;
    }
  }
  return 0;
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
  g_backtrace.store(bt, std::memory_order_release);
}

}  // namespace

bool native_stack_init() noexcept {
  std::call_once(g_once, init_once);
  return g_backtrace.load(std::memory_order_acquire) != nullptr;
}

void self_range_init() noexcept {
  if (!g_self_hi) dl_iterate_phdr(find_self, reinterpret_cast<void*>(&find_self));
}

bool pc_in_cdsa(uintptr_t pc) noexcept { return pc >= g_self_lo && pc < g_self_hi; }

int capture_native_stack(uintptr_t* out, int max) noexcept {
  BacktraceFn bt = g_backtrace.load(std::memory_order_acquire);
  if (!bt || max <= 0) return 0;
  // Our own frames (hook, recorder) sit on top: capture a few extra and drop them.
  constexpr int kSlack = 8;
  void* buf[256 + kSlack];
  int want = max + kSlack;
  if (want > static_cast<int>(sizeof buf / sizeof buf[0])) want = sizeof buf / sizeof buf[0];
  int n = bt(buf, want);
  int skip = 0;
  while (skip < n && pc_in_cdsa(reinterpret_cast<uintptr_t>(buf[skip]))) ++skip;
  int count = 0;
  for (int i = skip; i < n && count < max; ++i) out[count++] = reinterpret_cast<uintptr_t>(buf[i]);
  return count;
}

}  // namespace cdsa
