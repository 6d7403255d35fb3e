// The wrapper of every driver entry point, as interpose.cc and the trampoline shards share it.
//
// Every entry point of the generated table (shim/intercept/entry_points.h: one per
// PFN_<name>_v<version>[_ptsz|_ptds] typedef of the toolkit) gets kSlots trampolines, Tramp<Id, Slot>::fn, with
// exactly that typedef's prototype, and one Dispatch<Id>::run: what that kind of call does around the driver's
// function. Slot 0 is the exported symbol (interpose.cc defines the exports, each calling Tramp<Id, 0>::fn; its real
// function is the next definition after libcdsa, found with RTLD_NEXT); slots 1.. are bound on demand to the exact
// function pointers that dlsym or cuGetProcAddress returned (interpose.cc: bind), so a wrapper always calls the
// very function the program would have called.
//
// Where they are compiled: the ~700 entry points' Dispatch<Id>::run and their slot 1.. trampolines are split by id
// into kShards translation units (trampolines.inc, compiled once per shard: shim/intercept/CMakeLists.txt writes
// trampolines_<k>.cc), so that several compilers share what was one two-minute file. Each Dispatch<Id>::run is
// instantiated in exactly one shard and called directly from there and from its export (a hidden symbol: the same
// direct call as within one file); each shard fills its rows of the table (fill_trampolines<Shard>).
//
// Contract: internal to shim/intercept. Include it before anything that includes cuda.h: the old signatures
// (cuMemAlloc of CUDA 2.0, ...) are declared by cuda.h and cudaTypedefs.h only for the driver's own build, and
// this header asks for them. Everything here is lock-free and allocation-free; g_real is zero until bound.
#pragma once

#if defined(__cuda_cuda_h__) && !defined(__CUDA_API_VERSION_INTERNAL)
#error "shim/intercept/trampolines.h must come before cuda.h (it declares the old signatures)"
#endif
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_VERSION_INTERNAL_ODR 1  // ... without the enumerators that only the driver's build has
#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#if CDSA_WITH_GL
#include <cudaGLTypedefs.h>
#endif
#if CDSA_WITH_EGL
#include <cudaEGLTypedefs.h>
#endif
#if CDSA_WITH_VDPAU
#include <cudaVDPAUTypedefs.h>
#endif
#include <array>
#include <atomic>

#ifndef CDSA_TRAMPOLINE_SHARDS
#error "CDSA_TRAMPOLINE_SHARDS (the number of trampoline shards) comes from shim/intercept/CMakeLists.txt"
#endif

namespace cdsa::trampoline {

enum class Kind {
  Generic,
  Launch,
  LaunchEx,
  LaunchCoop,
  GraphLaunch,
  BeginCapture,
  BeginRecapture,
  EndCapture,
  EndCaptureToCig,
  GraphInstantiate,
  GraphInstantiateParams,
  GraphDestroy,
  GraphNode,
  StreamDestroy,
  ProcAddress,
  StreamInfo,
  ModuleUnload,
  StreamSync,
  CtxSync,
  StreamWork,
  DefaultStreamWork,
  SyncCopyToHost,
  StreamOp
};

#define CDSA_EXEMPT_NAME(name)
#define CDSA_WRAP_EXPORT(symbol, pfn, params, args)
enum CallId : int {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol) Id_##pfn,
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
  kNumCalls
};

struct CallInfo {
  bool per_thread;
  Kind kind;
};

inline constexpr CallInfo kCalls[] = {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol) {per_thread != 0, Kind::kind},
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
};

// The prototype of entry point Id (void: not an entry point; trampolines.inc uses that for the ids of other shards).
template <int Id>
struct Sig {
  using Fn = void;
};
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol) \
  template <>                                                    \
  struct Sig<Id_##pfn> {                                         \
    using Fn = pfn;                                              \
  };
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
#undef CDSA_EXEMPT_NAME
#undef CDSA_WRAP_EXPORT

constexpr int kSlots = 4;
constexpr int kShards = CDSA_TRAMPOLINE_SHARDS;
// Shard k holds the ids [shard_begin(k), shard_begin(k + 1)).
constexpr int shard_begin(int k) { return static_cast<int>(static_cast<long>(kNumCalls) * k / kShards); }

// The real function behind each trampoline (interpose.cc). Hidden, so each trampoline reads it as directly as a
// variable of its own file.
extern __attribute__((visibility("hidden"))) std::atomic<void*> g_real[kNumCalls][kSlots];
// Slot 0's first call: the next definition of the exported symbol (interpose.cc).
void* resolve_export_target(int id);

// What a call of entry point Id does around the driver's `real` (defined in trampolines.inc, instantiated in the
// shard that holds Id).
template <int Id, typename F = typename Sig<Id>::Fn>
struct Dispatch {};  // not an entry point: nothing
template <int Id, typename... A>
struct Dispatch<Id, CUresult(CUDAAPI*)(A...)> {
  static CUresult run(CUresult(CUDAAPI* real)(A...), A... a);
};

// Each file's own trampolines (the exports' in interpose.cc, slots 1.. in the shards), internal to it as when they
// were all one file. slot_real is inlined into every one of them, as it was then: a file of little else than the
// exports would stop inlining it at its growth limit, one call more per driver call.
namespace {

[[gnu::always_inline]] inline void* slot_real(int id, int slot) {
  void* p = g_real[id][slot].load(std::memory_order_acquire);
  if (__builtin_expect(p == nullptr && slot == 0, 0)) p = resolve_export_target(id);
  return p;
}

template <int Id, int Slot, typename F = typename Sig<Id>::Fn>
struct Tramp;
template <int Id, int Slot, typename... A>
struct Tramp<Id, Slot, CUresult(CUDAAPI*)(A...)> {
  static CUresult CUDAAPI fn(A... a) {
    using Fn = CUresult(CUDAAPI*)(A...);
    auto real = reinterpret_cast<Fn>(slot_real(Id, Slot));
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;  // no driver behind us at all
    return Dispatch<Id>::run(real, a...);
  }
};

}  // namespace

using TrampolineRow = std::array<void*, kSlots>;  // slot 0 stays null: the export is the symbol itself
// Shard `Shard` writes rows [shard_begin(Shard), shard_begin(Shard + 1)) of `table` (kNumCalls rows).
template <int Shard>
void fill_trampolines(TrampolineRow* table);

// cuGetProcAddress: hand back a wrapper bound to the pointer the driver returned (or a pass-through thunk), or
// nullptr to leave the driver's answer. `ask(ctx, v)` asks the same cuGetProcAddress, with the same flags, for
// `sym` at version v (interpose.cc).
using AskDriver = void* (*)(const void* ctx, int version);
void* wrap_proc_address(const char* sym, void* real, int version, cuuint64_t flags, AskDriver ask, const void* ctx);
// CDSA_DEBUG_ENTRY_POINTS (interpose.cc): its file descriptor, -1 when off; one line per request.
int debug_fd();
void log_request(const char* how, const char* name, int version, unsigned long long flags, int id, int result,
                 bool wrapped, bool thunk = false, bool null_answer = false);

}  // namespace cdsa::trampoline
