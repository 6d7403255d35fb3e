// Driver-level interposition: the exported cu* wrappers, the wrappers handed
// out by dlsym/dlvsym and cuGetProcAddress, and what each kind of call does.
//
// Every wrapped entry point of driver_calls.def gets kSlots trampolines.
// Slot 0 is the exported symbol (its real function is the next definition
// after libcdsa, found with RTLD_NEXT); slots 1.. are bound on demand to the
// exact function pointers that dlsym or cuGetProcAddress returned, so a
// wrapper always calls the very function the program would have called.
#include <array>
#include <atomic>
#include <cstring>
#include <cuda.h>
#include <dlfcn.h>
#include <tuple>
#include <utility>

#include "shim/assert_capture.h"
#include "shim/config.h"
#include "shim/driver.h"
#include "shim/fault.h"
#include "shim/graph_capture.h"
#include "shim/interpose.h"
#include "shim/launch.h"
#include "shim/lifecycle.h"
#include "shim/log.h"
#include "shim/native_stack.h"
#include "shim/reentrancy.h"

#define CDSA_EXPORT __attribute__((visibility("default")))

namespace cdsa {
namespace {

enum class Kind {
  Generic,
  Launch,
  LaunchEx,
  LaunchCoop,
  GraphLaunch,
  BeginCapture,
  EndCapture,
  GraphInstantiate,
  GraphInstantiateParams,
  StreamDestroy,
  ProcAddress,
  ProcAddressV2
};

enum CallId : int {
#define CDSA_CALL(name, base, since, until, ptsz, kind, params, args) Id_##name,
#include "shim/driver_calls.def"
#undef CDSA_CALL
  kNumCalls
};

struct CallInfo {
  const char* name;
  const char* base;
  int since, until;
  bool ptsz;
  Kind kind;
};

constexpr CallInfo kCalls[] = {
#define CDSA_CALL(name, base, since, until, ptsz, kind, params, args) {#name, #base, since, until, ptsz, Kind::kind},
#include "shim/driver_calls.def"
#undef CDSA_CALL
};

template <int Id>
struct Sig;
#define CDSA_CALL(name, base, since, until, ptsz, kind, params, args) \
  template <>                                                           \
  struct Sig<Id_##name> {                                               \
    using Fn = CUresult(CUDAAPI*) params;                               \
  };
#include "shim/driver_calls.def"
#undef CDSA_CALL

constexpr int kSlots = 4;
std::atomic<void*> g_real[kNumCalls][kSlots];  // zero-initialised: constant initialisation

void* resolve_export_target(int id) {
  // The definition after ours in the lookup order (normally libcuda's).
  void* p = real_dlsym()(RTLD_NEXT, kCalls[id].name);
  if (!p) {
    // libcuda loaded RTLD_LOCAL (not in the global scope): look in it directly.
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) p = real_dlsym()(h, kCalls[id].name);
  }
  if (p) g_real[id][0].store(p, std::memory_order_release);
  return p;
}

inline void* slot_real(int id, int slot) {
  void* p = g_real[id][slot].load(std::memory_order_acquire);
  if (__builtin_expect(p == nullptr && slot == 0, 0)) p = resolve_export_target(id);
  return p;
}

// ---------------------------------------------------------------- handlers
template <int Id>
inline void check(CUresult r) {
  if (__builtin_expect(is_sticky_fault(r), 0)) on_sticky_fault(r, kCalls[Id].name);
}

// What cuLaunchKernel and cuLaunchCooperativeKernel share: record on success, check for a sticky fault otherwise.
template <int Id>
CUresult after_grid_launch(CUresult r, LaunchKind kind, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                           unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s) {
  if (r == CUDA_SUCCESS) {
    LaunchInfo li;
    li.kind = kind;
    li.func = f;
    li.stream = s;
    li.per_thread = kCalls[Id].ptsz;
    li.grid[0] = gx, li.grid[1] = gy, li.grid[2] = gz;
    li.block[0] = bx, li.block[1] = by, li.block[2] = bz;
    li.shared_mem = shmem;
    record_launch(li);
  } else {
    check<Id>(r);
  }
  return r;
}

template <int Id, typename F>
CUresult on_launch(F real, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, CUstream s, void** params, void** extra) {
  return after_grid_launch<Id>(real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra), LaunchKind::Kernel, f, gx,
                               gy, gz, bx, by, bz, shmem, s);
}

template <int Id, typename F>
CUresult on_launch_coop(F real, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, CUstream s, void** params) {
  return after_grid_launch<Id>(real(f, gx, gy, gz, bx, by, bz, shmem, s, params), LaunchKind::Cooperative, f, gx,
                               gy, gz, bx, by, bz, shmem, s);
}

template <int Id, typename F>
CUresult on_launch_ex(F real, const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {
  CUresult r = real(cfg, f, params, extra);
  if (r == CUDA_SUCCESS && cfg) {
    LaunchInfo li;
    li.kind = LaunchKind::KernelEx;
    li.func = f;
    li.stream = cfg->hStream;
    li.per_thread = kCalls[Id].ptsz;
    li.grid[0] = cfg->gridDimX, li.grid[1] = cfg->gridDimY, li.grid[2] = cfg->gridDimZ;
    li.block[0] = cfg->blockDimX, li.block[1] = cfg->blockDimY, li.block[2] = cfg->blockDimZ;
    li.shared_mem = cfg->sharedMemBytes;
    for (unsigned i = 0; i < cfg->numAttrs && cfg->attrs; ++i)
      if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && cfg->attrs[i].value.cooperative)
        li.kind = LaunchKind::Cooperative;
    record_launch(li);
  } else {
    check<Id>(r);
  }
  return r;
}

template <int Id, typename F>
CUresult on_graph_launch(F real, CUgraphExec g, CUstream s) {
  CUresult r = real(g, s);
  if (r == CUDA_SUCCESS) {
    LaunchInfo li;
    li.kind = LaunchKind::Graph;
    li.graph_exec = g;
    li.stream = s;
    li.per_thread = kCalls[Id].ptsz;
    record_launch(li);
  } else {
    check<Id>(r);
  }
  return r;
}

// cuGetProcAddress: hand back a wrapper bound to the pointer the driver returned.
void* wrap_proc_address(const char* sym, void* real, int version, cuuint64_t flags);

template <int Id, typename F, typename... A>
CUresult dispatch(F real, A... a) {
  constexpr Kind k = kCalls[Id].kind;
  if (!config().enabled || InCdsa::active()) return real(a...);
  DriverCallScope scope;  // lets the fault handler see what this very call printed (the device's assert text)
  ensure_started(reinterpret_cast<const void*>(real));
  // Register the breadcrumb memory before the first kernel runs, so even the first launch gets its mark.
  if constexpr (k == Kind::Launch || k == Kind::LaunchCoop)
    prepare_launch(std::get<0>(std::tuple<A...>(a...)));
  else if constexpr (k == Kind::LaunchEx)
    prepare_launch(std::get<1>(std::tuple<A...>(a...)));
  else if constexpr (k == Kind::GraphLaunch)
    prepare_launch(nullptr);
  if constexpr (k == Kind::Launch) {
    return on_launch<Id>(real, a...);
  } else if constexpr (k == Kind::LaunchCoop) {
    return on_launch_coop<Id>(real, a...);
  } else if constexpr (k == Kind::LaunchEx) {
    return on_launch_ex<Id>(real, a...);
  } else if constexpr (k == Kind::GraphLaunch) {
    return on_graph_launch<Id>(real, a...);
  } else if constexpr (k == Kind::BeginCapture) {
    CUresult r = real(a...);
    if (r == CUDA_SUCCESS) note_capture_begin(std::get<0>(std::tuple<A...>(a...)), kCalls[Id].ptsz);
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::EndCapture) {
    auto args = std::tuple<A...>(a...);
    CUresult r = real(a...);
    CUgraph* out = std::get<1>(args);
    note_capture_end(std::get<0>(args), kCalls[Id].ptsz, (r == CUDA_SUCCESS && out) ? *out : nullptr);
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::GraphInstantiate || k == Kind::GraphInstantiateParams) {
    auto args = std::tuple<A...>(a...);
    CUresult r = real(a...);
    CUgraphExec* out = std::get<0>(args);
    if (r == CUDA_SUCCESS && out) note_graph_instantiate(*out, std::get<1>(args));
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::StreamDestroy) {
    CUresult r = real(a...);
    note_stream_destroyed();
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::ProcAddress || k == Kind::ProcAddressV2) {
    auto args = std::tuple<A...>(a...);
    CUresult r = real(a...);
    const char* sym = std::get<0>(args);
    void** pfn = std::get<1>(args);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn) {
      void* w = wrap_proc_address(sym, *pfn, std::get<2>(args), std::get<3>(args));
      if (w) *pfn = w;
    }
    return r;
  } else {
    CUresult r = real(a...);
    check<Id>(r);
    return r;
  }
}

template <int Id, int Slot, typename F = typename Sig<Id>::Fn>
struct Tramp;
template <int Id, int Slot, typename... A>
struct Tramp<Id, Slot, CUresult(CUDAAPI*)(A...)> {
  static CUresult CUDAAPI fn(A... a) {
    using Fn = CUresult(CUDAAPI*)(A...);
    auto real = reinterpret_cast<Fn>(slot_real(Id, Slot));
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;  // no driver behind us at all
    return dispatch<Id>(real, a...);
  }
};

template <int Id, size_t... S>
std::array<void*, kSlots> tramps_for(std::index_sequence<S...>) {
  return {reinterpret_cast<void*>(&Tramp<Id, static_cast<int>(S)>::fn)...};
}
template <size_t... I>
std::array<std::array<void*, kSlots>, kNumCalls> make_tramps(std::index_sequence<I...>) {
  return {tramps_for<static_cast<int>(I)>(std::make_index_sequence<kSlots>())...};
}
const std::array<std::array<void*, kSlots>, kNumCalls>& tramps() {
  static const auto table = make_tramps(std::make_index_sequence<kNumCalls>());
  return table;
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
           kCalls[id].name);
  return nullptr;
}

int find_exported(const char* name) {
  for (int i = 0; i < kNumCalls; ++i)
    if (!strcmp(kCalls[i].name, name)) return i;
  return -1;
}

void* wrap_proc_address(const char* sym, void* real, int version, cuuint64_t flags) {
  bool want_ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  int fallback = -1;
  for (int i = 0; i < kNumCalls; ++i) {
    const CallInfo& c = kCalls[i];
    if (strcmp(c.base, sym) != 0 || version < c.since || (c.until && version >= c.until)) continue;
    if (c.ptsz == want_ptsz) return bind(i, real);
    if (!c.ptsz) fallback = i;  // no per-thread variant of this one: the legacy entry has the same signature
  }
  return fallback >= 0 ? bind(fallback, real) : nullptr;
}

}  // namespace

void* wrap_dlsym_result(void* handle, const char* name, void* real) noexcept {
  (void)handle;
  if (!real || !config().enabled) return real;
  if (pc_in_cdsa(reinterpret_cast<uintptr_t>(real))) return real;  // found our own export
  int id = find_exported(name);
  if (id < 0) return real;
  void* w = bind(id, real);
  return w ? w : real;
}

void interpose_init() noexcept { (void)tramps(); }

}  // namespace cdsa

// ---------------------------------------------------------------- exported driver symbols
using namespace cdsa;
#define CDSA_CALL(name, base, since, until, ptsz, kind, params, args)                        \
  extern "C" CDSA_EXPORT CUresult CUDAAPI cdsa_export_##name params __asm__(#name);          \
  extern "C" CUresult CUDAAPI cdsa_export_##name params { return Tramp<Id_##name, 0>::fn args; }
#include "shim/driver_calls.def"
#undef CDSA_CALL
