// Driver-level interposition: the exported cu* wrappers, the wrappers handed
// out by dlsym/dlvsym and cuGetProcAddress, and the table that binds them.
//
// Every entry point of the generated table (shim/intercept/entry_points.h: one per
// PFN_<name>_v<version>[_ptsz|_ptds] typedef of the toolkit) gets kSlots
// trampolines with exactly that typedef's prototype (shim/intercept/trampolines.h:
// what each kind of call does, compiled in shards). Slot 0 is the exported
// symbol (its real function is the next definition after libcdsa, found with
// RTLD_NEXT); slots 1.. are bound on demand to the exact function pointers that
// dlsym or cuGetProcAddress returned, so a wrapper always calls the very
// function the program would have called.
#include "shim/intercept/trampolines.h"  // first: before anything includes cuda.h

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>

#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/common/log.h"
#include "shim/common/passthrough.h"
#include "shim/intercept/entry_points.h"
#include "shim/intercept/interpose.h"
#include "shim/stacks/native_stack.h"

#include "base/export.h"

namespace cdsa {
using namespace trampoline;

std::atomic<void*> trampoline::g_real[kNumCalls][kSlots];  // zero-initialised: constant initialisation

void* trampoline::resolve_export_target(int id) {
  const char* symbol = entry_point(id).symbol;
  // The definition after ours in the lookup order (libcuda's, or the export of a hook loaded after cdsa): libc's
  // dlsym answers RTLD_NEXT relative to libcdsa.so, its caller here.
  void* p = real_dlsym()(RTLD_NEXT, symbol);
  if (!p) {
    // libcuda loaded RTLD_LOCAL (not in the global scope): look in it directly, through the rest of the dlsym
    // chain (a hook after cdsa answers with its own).
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
      p = next_dlsym()(h, symbol);
      dlclose(h);
    }
  }
  if (p) g_real[id][0].store(p, std::memory_order_release);
  return p;
}

namespace {

template <int... K>
void fill_all_shards(TrampolineRow* table, std::integer_sequence<int, K...>) {
  (fill_trampolines<K>(table), ...);
}
const TrampolineRow* tramps() {
  static const auto table = [] {
    std::array<TrampolineRow, kNumCalls> t{};
    fill_all_shards(t.data(), std::make_integer_sequence<int, kShards>());
    return t;
  }();
  return table.data();
}

void* bind(int id, void* real) {
  if (pc_in_cdsa(reinterpret_cast<uintptr_t>(real))) return real;  // already one of ours
  for (int s = 1; s < kSlots; ++s) {
    void* cur = g_real[id][s].load(std::memory_order_acquire);
    if (cur == real) return tramps()[id][s];
    if (cur == nullptr) {
      void* expected = nullptr;
      if (g_real[id][s].compare_exchange_strong(expected, real, std::memory_order_acq_rel) || expected == real)
        return tramps()[id][s];
    }
  }
  log_line("more than %d distinct implementations of %s: the extra one is not wrapped", kSlots - 1,
           entry_point(id).pfn);
  return nullptr;
}

}  // namespace

// CDSA_DEBUG_ENTRY_POINTS=<file>: one line per cuGetProcAddress request and per wrapped-name dlsym, appended
// (tests/e2e/test_real_runtimes.py reads it). Each line:
//   <how> <name> <version> <flags> -> <typedef>|exempt|unknown <wrapped|thunk|passed|not-found:<code>>
// (not-found:0: the driver answered CUDA_SUCCESS with a NULL function)
// where the typedef is the wrapper cdsa selects for the request (also when the driver found nothing; "unknown"
// with "thunk": no wrapper fits, the answer went back through a pass-through thunk, shim/common/passthrough.h).
int trampoline::debug_fd() {
  static int fd = [] {
    const char* path = config().debug_entry_points;
    if (!*path) return -1;
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f < 0) log_line("CDSA_DEBUG_ENTRY_POINTS=%s: cannot open it for appending; nothing is logged", path);
    return f;
  }();
  return fd;
}

void trampoline::log_request(const char* how, const char* name, int version, unsigned long long flags, int id,
                             int result, bool wrapped, bool thunk, bool null_answer) {
  int fd = debug_fd();
  if (fd < 0) return;
  const char* selected = id >= 0 ? entry_point(id).pfn : name && is_exempt_entry(name) ? "exempt" : "unknown";
  char outcome[32];
  if (result != CUDA_SUCCESS || null_answer)
    snprintf(outcome, sizeof outcome, "not-found:%d", result);
  else
    snprintf(outcome, sizeof outcome, "%s", thunk ? "thunk" : wrapped ? "wrapped" : "passed");
  char line[512];
  int n = snprintf(line, sizeof line, "%s %s %d %llu -> %s %s\n", how, name && *name ? name : "(empty)", version, flags,
                   selected, outcome);
  if (n > 0) (void)!::write(fd, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
}

namespace {

// The decisions for requests above the table's header version, per (name, version, flags, the driver's answer):
// each costs one more driver call the first time, and must give the same thunk every time.
class CeilingCache {
 public:
  // The cached answer, or nullptr.
  void* find(const char* sym, int version, cuuint64_t flags, void* real) const {
    const int n = count_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      const Entry& e = entries_[i];
      if (e.real == real && e.version == version && e.flags == flags && !strcmp(e.name, sym)) return e.result;
    }
    return nullptr;
  }
  void add(const char* sym, int version, cuuint64_t flags, void* real, void* result) {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = count_.load(std::memory_order_relaxed);
    if (n >= kEntries || strlen(sym) >= sizeof entries_[0].name) return;  // not cached: asked again next time
    Entry& e = entries_[n];
    snprintf(e.name, sizeof e.name, "%s", sym);
    e.version = version, e.flags = flags, e.real = real, e.result = result;
    count_.store(n + 1, std::memory_order_release);
  }

 private:
  static constexpr int kEntries = 2048;
  struct Entry {
    char name[96];
    int version;
    cuuint64_t flags;
    void* real;
    void* result;
  };
  Entry entries_[kEntries];
  std::atomic<int> count_{0};
  std::mutex mu_;
};
CeilingCache g_ceiling;

}  // namespace

// Which function cdsa hands back for cuGetProcAddress(sym, version, flags), given the driver's answer `real`:
// - a request at or below the table's header version: the wrapper of the newest typedef at or below `version`
//   (the driver's own rule, on the same headers);
// - a request above it: the driver is asked again for `sym` at the header version, through the same lookup and
//   flags. The same pointer back is the same implementation, so the same prototype: the header version's wrapper.
//   A different one (or none) is a version whose prototype the headers do not have (cuLaunchHostFunc at 13010 is
//   cuLaunchHostFunc_v2, with a 4th argument): a wrapper of the old prototype would corrupt its arguments;
// - no wrapper fits (that, or a name the headers lack): a pass-through thunk (shim/common/passthrough.h), never
//   the raw pointer, so cdsa still knows the call was made. Exempt names come back raw.
void* trampoline::wrap_proc_address(const char* sym, void* real, int version, cuuint64_t flags, AskDriver ask,
                                    const void* ctx) {
  const bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const int ceiling = header_version();
  if (is_exempt_entry(sym) || pc_in_cdsa(reinterpret_cast<uintptr_t>(real))) {
    if (debug_fd() >= 0) log_request("cuGetProcAddress", sym, version, flags, -1, CUDA_SUCCESS, false);
    return nullptr;
  }
  if (version > ceiling)
    if (void* cached = g_ceiling.find(sym, version, flags, real)) return cached;
  int id = -1;
  if (version <= ceiling)
    id = select_entry_point(sym, version, per_thread);
  else if (ask(ctx, ceiling) == real)
    id = select_entry_point(sym, ceiling, per_thread);
  void* w = id >= 0 ? bind(id, real) : nullptr;
  bool thunk = false;
  if (!w) {
    w = passthrough_thunk(sym, version, real);
    thunk = w != nullptr;
  }
  if (version > ceiling && w) g_ceiling.add(sym, version, flags, real, w);
  if (debug_fd() >= 0)
    log_request("cuGetProcAddress", sym, version, flags, thunk ? -1 : id, CUDA_SUCCESS, w && !thunk, thunk);
  return w;
}

namespace {
// Whether `p` is code of a library named libcuda.so* (the driver, or the simulated one), not of another object
// that happens to export a cu* name.
bool in_libcuda(void* p) {
  Dl_info info;
  if (!dladdr(p, &info) || !info.dli_fname) return false;
  const char* base = info.dli_fname;
  for (const char* c = info.dli_fname; *c; ++c)
    if (*c == '/') base = c + 1;
  return !strncmp(base, "libcuda.so", 10);
}
}  // namespace

void* wrap_dlsym_result(void* handle, const char* name, void* real) noexcept {
  (void)handle;
  if (!config().enabled) return real;
  int id = find_entry_symbol(name);
  if (!real) {
    if (debug_fd() >= 0) log_request("dlsym", name, 0, 0, id, CUDA_ERROR_NOT_FOUND, false);
    return real;
  }
  if (id < 0) {
    // A driver export the table does not know (a newer libcuda's cuLaunchHostFunc_v2): its prototype is unknown,
    // so no wrapper; a thunk keeps the call seen.
    void* t = in_libcuda(real) && !pc_in_cdsa(reinterpret_cast<uintptr_t>(real)) ? passthrough_thunk(name, 0, real)
                                                                                   : nullptr;
    if (debug_fd() >= 0) log_request("dlsym", name, 0, 0, -1, CUDA_SUCCESS, false, t != nullptr);
    return t ? t : real;
  }
  void* w = real;
  if (id >= 0 && !pc_in_cdsa(reinterpret_cast<uintptr_t>(real))) {
    void* b = bind(id, real);
    if (b) w = b;
  }
  if (debug_fd() >= 0)
    log_request("dlsym", name, 0, 0, id, CUDA_SUCCESS, w != real || pc_in_cdsa(reinterpret_cast<uintptr_t>(real)));
  return w;
}

bool is_wrapped_symbol(const char* name) noexcept {
  return find_entry_symbol(name) >= 0 || is_unknown_driver_symbol(name);
}

void interpose_init() noexcept { (void)tramps(); }

}  // namespace cdsa

// ---------------------------------------------------------------- exported driver symbols
// Every symbol of the toolkit's stub libcuda.so that has a typedef (all but the exempt ones), with the
// typedef's own parameter list; the static_assert proves the prototype is exactly the typedef's.
using namespace cdsa::trampoline;
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol)
#define CDSA_EXEMPT_NAME(name)
#define CDSA_WRAP_EXPORT(symbol, pfn, params, args)                                               \
  extern "C" CDSA_EXPORT CUresult CUDAAPI cdsa_export_##symbol params __asm__(#symbol);           \
  extern "C" CUresult CUDAAPI cdsa_export_##symbol params { return Tramp<Id_##pfn, 0>::fn args; } \
  static_assert(std::is_same_v<decltype(&cdsa_export_##symbol), pfn>);
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
#undef CDSA_EXEMPT_NAME
#undef CDSA_WRAP_EXPORT
