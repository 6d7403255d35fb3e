// Driver-level interposition: the exported cu* wrappers, the wrappers handed
// out by dlsym/dlvsym and cuGetProcAddress, and what each kind of call does.
//
// Every entry point of the generated table (shim/intercept/entry_points.h: one per
// PFN_<name>_v<version>[_ptsz|_ptds] typedef of the toolkit) gets kSlots
// trampolines with exactly that typedef's prototype. Slot 0 is the exported
// symbol (its real function is the next definition after libcdsa, found with
// RTLD_NEXT); slots 1.. are bound on demand to the exact function pointers that
// dlsym or cuGetProcAddress returned, so a wrapper always calls the very
// function the program would have called.
//
// The old signatures (cuMemAlloc of CUDA 2.0, ...) are declared by cuda.h and
// cudaTypedefs.h only for the driver's own build: this file asks for them.
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
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "shim/record/assert_capture.h"
#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/intercept/entry_points.h"
#include "shim/fault/fault.h"
#include "shim/record/graph_capture.h"
#include "shim/intercept/interpose.h"
#include "shim/record/launch.h"
#include "shim/intercept/lifecycle.h"
#include "shim/common/log.h"
#include "shim/common/passthrough.h"
#include "shim/record/native_stack.h"
#include "shim/common/reentrancy.h"

#include "base/export.h"

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
  GraphDestroy,
  GraphNode,
  StreamDestroy,
  ProcAddress,
  StreamInfo,
  ModuleUnload
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

constexpr CallInfo kCalls[] = {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol) {per_thread != 0, Kind::kind},
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
};

template <int Id>
struct Sig;
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
std::atomic<void*> g_real[kNumCalls][kSlots];  // zero-initialised: constant initialisation

void* resolve_export_target(int id) {
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

inline void* slot_real(int id, int slot) {
  void* p = g_real[id][slot].load(std::memory_order_acquire);
  if (__builtin_expect(p == nullptr && slot == 0, 0)) p = resolve_export_target(id);
  return p;
}

// ---------------------------------------------------------------- handlers
// The first CUstream argument of a call, if its prototype has one.
template <typename... A>
constexpr bool kTakesStream = (std::is_same_v<A, CUstream> || ...);
template <typename T>
inline void pick_stream(CUstream* s, bool* found, T v) {
  if constexpr (std::is_same_v<T, CUstream>) {
    if (!*found) *s = v, *found = true;
  }
}
template <typename... A>
inline CUstream first_stream(A... a) {
  CUstream s = nullptr;
  bool found = false;
  (pick_stream(&s, &found, a), ...);
  return s;
}

template <int Id>
inline void check(CUresult r) {
  if (__builtin_expect(is_sticky_fault(r), 0)) {
    const EntryPoint& e = entry_point(Id);
    on_sticky_fault(r, e.symbol[0] ? e.symbol : e.base);  // the exported name says the version: cuMemcpyDtoH_v2
  }
}

// The launch handlers, one per launching Kind, chosen by KindTag<k>. Each follows the launch protocol
// (shim/record/launch.h) with a LaunchScope: begun before the driver sees the launch (breadcrumbs registered before
// the first kernel runs, so even the first launch gets its mark; the launch in flight, so a fault report on another
// thread waits for it, since the failing launch may be this one), then recorded, or checked for a sticky fault.
template <Kind k>
struct KindTag {};

// What cuLaunchKernel and cuLaunchCooperativeKernel share: record on success, check for a sticky fault otherwise.
template <int Id>
CUresult after_grid_launch(LaunchScope& launch, CUresult r, LaunchKind kind, CUfunction f, unsigned gx, unsigned gy,
                           unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s) {
  if (r == CUDA_SUCCESS) {
    LaunchInfo li;
    li.kind = kind;
    li.func = f;
    li.stream = s;
    li.per_thread = kCalls[Id].per_thread;
    li.grid[0] = gx, li.grid[1] = gy, li.grid[2] = gz;
    li.block[0] = bx, li.block[1] = by, li.block[2] = bz;
    li.shared_mem = shmem;
    launch.succeeded(li);
  } else {
    check<Id>(r);
  }
  return r;
}

template <int Id, typename F>
CUresult on_launch(KindTag<Kind::Launch>, F real, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {
  LaunchScope launch(f, s, kCalls[Id].per_thread);
  return after_grid_launch<Id>(launch, real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra), LaunchKind::Kernel,
                               f, gx, gy, gz, bx, by, bz, shmem, s);
}

template <int Id, typename F>
CUresult on_launch(KindTag<Kind::LaunchCoop>, F real, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params) {
  LaunchScope launch(f, s, kCalls[Id].per_thread);
  return after_grid_launch<Id>(launch, real(f, gx, gy, gz, bx, by, bz, shmem, s, params), LaunchKind::Cooperative, f,
                               gx, gy, gz, bx, by, bz, shmem, s);
}

template <int Id, typename F>
CUresult on_launch(KindTag<Kind::LaunchEx>, F real, const CUlaunchConfig* cfg, CUfunction f, void** params,
                   void** extra) {
  // The config and its attributes go to the driver untouched; cdsa only reads whether the launch is a PDL one.
  bool programmatic = false;
  for (unsigned i = 0; cfg && cfg->attrs && i < cfg->numAttrs; ++i) {
    const CUlaunchAttribute& a = cfg->attrs[i];
    if ((a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION && a.value.programmaticStreamSerializationAllowed) ||
        (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT && a.value.programmaticEvent.event))
      programmatic = true;
  }
  LaunchScope launch(f, cfg ? cfg->hStream : nullptr, kCalls[Id].per_thread,
                     !cfg ? MarkBefore::Leave : programmatic ? MarkBefore::Fold : MarkBefore::Settle);
  CUresult r = real(cfg, f, params, extra);
  if (r == CUDA_SUCCESS && cfg) {
    LaunchInfo li;
    li.kind = LaunchKind::KernelEx;
    li.func = f;
    li.stream = cfg->hStream;
    li.per_thread = kCalls[Id].per_thread;
    li.grid[0] = cfg->gridDimX, li.grid[1] = cfg->gridDimY, li.grid[2] = cfg->gridDimZ;
    li.block[0] = cfg->blockDimX, li.block[1] = cfg->blockDimY, li.block[2] = cfg->blockDimZ;
    li.shared_mem = cfg->sharedMemBytes;
    li.programmatic = programmatic;
    for (unsigned i = 0; i < cfg->numAttrs && cfg->attrs; ++i)
      if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && cfg->attrs[i].value.cooperative)
        li.kind = LaunchKind::Cooperative;
    launch.succeeded(li);
  } else {
    check<Id>(r);
  }
  return r;
}

template <int Id, typename F>
CUresult on_launch(KindTag<Kind::GraphLaunch>, F real, CUgraphExec g, CUstream s) {
  LaunchScope launch(nullptr, s, kCalls[Id].per_thread);
  CUresult r = real(g, s);
  if (r == CUDA_SUCCESS) {
    LaunchInfo li;
    li.kind = LaunchKind::Graph;
    li.graph_exec = g;
    li.stream = s;
    li.per_thread = kCalls[Id].per_thread;
    launch.succeeded(li);
  } else {
    check<Id>(r);
  }
  return r;
}

// The graph-building and exec-changing calls (Kind::GraphNode), after the driver accepted them: what each kernel
// node is (shim/record/graph_capture.h). `call` is the exported name, kept as what made or changed the node.
// Overloads by the entry point's own parameter types, so each version's struct layout is read as what it is.
template <class P>
inline constexpr bool kKernelParams = std::is_same_v<P, CUDA_KERNEL_NODE_PARAMS_v1> ||
                                      std::is_same_v<P, CUDA_KERNEL_NODE_PARAMS_v2>;

void note_added_node(CUgraph g, CUgraphNode n, const CUgraphNodeParams* p, const char* call) {
  if (!p) return;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      note_kernel_node_added(g, n, kernel_node_desc(p->kernel), call);
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      note_child_node_added(g, n, p->graph.graph);
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      note_conditional_node_added(g, n, p->conditional.phGraph_out, p->conditional.size);
      break;
    default:
      note_other_node_added(g, n, p->type);
  }
}

// cuGraphAddKernelNode[_v2]
template <class P>
  requires kKernelParams<P>
void on_graph_call(const char* call, CUgraphNode* out, CUgraph g, const CUgraphNode*, size_t, const P* p) {
  if (out && p) note_kernel_node_added(g, *out, kernel_node_desc(*p), call);
}
// cuGraphAddNode, cuGraphAddNode_v2 (edge data)
void on_graph_call(const char* call, CUgraphNode* out, CUgraph g, const CUgraphNode*, size_t, CUgraphNodeParams* p) {
  if (out) note_added_node(g, *out, p, call);
}
void on_graph_call(const char* call, CUgraphNode* out, CUgraph g, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                   CUgraphNodeParams* p) {
  if (out) note_added_node(g, *out, p, call);
}
// cuGraphAddChildGraphNode
void on_graph_call(const char*, CUgraphNode* out, CUgraph g, const CUgraphNode*, size_t, CUgraph child) {
  if (out) note_child_node_added(g, *out, child);
}
// cuGraphChildGraphNodeGetGraph: the child node's embedded graph (not a copy: changes to it are the node's).
void on_graph_call(const char*, CUgraphNode n, CUgraph* out) {
  if (out) note_child_graph_of(n, *out);
}
// cuGraphKernelNodeSetParams[_v2]
template <class P>
  requires kKernelParams<P>
void on_graph_call(const char* call, CUgraphNode n, const P* p) {
  if (p) note_kernel_node_set(n, kernel_node_desc(*p), call);
}
// cuGraphNodeSetParams
void on_graph_call(const char* call, CUgraphNode n, CUgraphNodeParams* p) {
  if (p && p->type == CU_GRAPH_NODE_TYPE_KERNEL) note_kernel_node_set(n, kernel_node_desc(p->kernel), call);
}
// cuGraphKernelNodeSetAttribute: a device-updatable node changes where cdsa cannot see it.
void on_graph_call(const char*, CUgraphNode n, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue* v) {
  if (attr == CU_KERNEL_NODE_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE && v && v->deviceUpdatableKernelNode.deviceUpdatable)
    note_device_updatable(n);
}
// cuGraphDestroyNode
void on_graph_call(const char*, CUgraphNode n) { note_node_destroy(n); }
// cuGraphClone
void on_graph_call(const char*, CUgraph* out, CUgraph original) {
  if (out) note_graph_clone(*out, original);
}
// cuGraphExecKernelNodeSetParams[_v2]
template <class P>
  requires kKernelParams<P>
void on_graph_call(const char* call, CUgraphExec x, CUgraphNode n, const P* p) {
  if (p) note_exec_kernel_node_set(x, n, kernel_node_desc(*p), call);
}
// cuGraphExecNodeSetParams
void on_graph_call(const char* call, CUgraphExec x, CUgraphNode n, CUgraphNodeParams* p) {
  if (!p) return;
  if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) note_exec_kernel_node_set(x, n, kernel_node_desc(p->kernel), call);
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) note_exec_child_set(x, n, p->graph.graph);
}
// cuGraphExecChildGraphNodeSetParams
void on_graph_call(const char*, CUgraphExec x, CUgraphNode n, CUgraph child) { note_exec_child_set(x, n, child); }
// cuGraphNodeSetEnabled
void on_graph_call(const char*, CUgraphExec x, CUgraphNode n, unsigned enabled) {
  note_exec_node_enabled(x, n, enabled != 0);
}
// cuGraphExecUpdate (10020: error node and result; 12000: CUgraphExecUpdateResultInfo)
void on_graph_call(const char* call, CUgraphExec x, CUgraph g, CUgraphNode*, CUgraphExecUpdateResult*) {
  note_exec_update(x, g, call);
}
void on_graph_call(const char* call, CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo*) {
  note_exec_update(x, g, call);
}

// Whether an instantiation lets the device launch the exec (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH).
template <class T>
bool device_launch_flag(T flags_or_params) {
  if constexpr (std::is_integral_v<T>)
    return flags_or_params & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
  else if constexpr (std::is_same_v<T, CUDA_GRAPH_INSTANTIATE_PARAMS*>)
    return flags_or_params && (flags_or_params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH);
  else
    return false;
}

// cuGetProcAddress: hand back a wrapper bound to the pointer the driver returned (or a pass-through thunk).
// `ask(ctx, v)` asks the same cuGetProcAddress, with the same flags, for `sym` at version v.
using AskDriver = void* (*)(const void* ctx, int version);
void* wrap_proc_address(const char* sym, void* real, int version, cuuint64_t flags, AskDriver ask, const void* ctx);
void log_request(const char* how, const char* name, int version, unsigned long long flags, int id, int result,
                 bool wrapped, bool thunk = false, bool null_answer = false);
int debug_fd();

template <int Id, typename F, typename... A>
CUresult dispatch(F real, A... a) {
  constexpr Kind k = kCalls[Id].kind;
  // A wrapper reached from inside another (a second driver layer between the program and libcuda that resolves
  // libcuda's symbols with dlsym gets cdsa's wrappers too) passes straight through: each call is recorded, and
  // each fault reported, once, by the outermost wrapper.
  if (!config().enabled || InCdsa::active() || in_driver_call()) return real(a...);
  DriverCallScope scope;  // lets the fault handler see what this very call printed (the device's assert text)
  ensure_started(reinterpret_cast<const void*>(real));
  if constexpr (k == Kind::Launch || k == Kind::LaunchCoop || k == Kind::LaunchEx || k == Kind::GraphLaunch) {
    return on_launch<Id>(KindTag<k>{}, real, a...);  // the launch handler of this kind (above)
  } else if constexpr (k == Kind::BeginCapture) {
    before_stream_operation(std::get<0>(std::tuple<A...>(a...)), kCalls[Id].per_thread);  // not into the graph
    CUresult r = real(a...);
    if (r == CUDA_SUCCESS) note_capture_begin(std::get<0>(std::tuple<A...>(a...)), kCalls[Id].per_thread);
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::EndCapture) {
    auto args = std::tuple<A...>(a...);
    CUresult r = real(a...);
    CUgraph* out = std::get<1>(args);
    note_capture_end(std::get<0>(args), kCalls[Id].per_thread, (r == CUDA_SUCCESS && out) ? *out : nullptr);
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::GraphInstantiate || k == Kind::GraphInstantiateParams) {
    auto args = std::tuple<A...>(a...);
    CUresult r = real(a...);
    CUgraphExec* out = std::get<0>(args);
    if (r == CUDA_SUCCESS && out) note_graph_instantiate(*out, std::get<1>(args), device_launch_flag(std::get<2>(args)));
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::GraphDestroy) {
    note_graph_destroy(std::get<0>(std::tuple<A...>(a...)));  // before: the handle may come back for another graph
    CUresult r = real(a...);
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::GraphNode) {
    CUresult r = real(a...);
    if (r == CUDA_SUCCESS) {
      const EntryPoint& e = entry_point(Id);
      on_graph_call(e.symbol[0] ? e.symbol : e.base, a...);
    }
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::StreamDestroy) {
    if constexpr (kTakesStream<A...>)
      before_stream_operation(first_stream(a...), kCalls[Id].per_thread);
    else
      before_context_teardown();
    CUresult r = real(a...);
    note_stream_destroyed();
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::ModuleUnload) {
    CUresult r = real(a...);
    if (r == CUDA_SUCCESS) note_module_unloaded();  // its handles may come back for other kernels
    check<Id>(r);
    return r;
  } else if constexpr (k == Kind::ProcAddress) {
    auto args = std::tuple<A...>(a...);
    CUresult r = real(a...);
    const char* sym = std::get<0>(args);
    void** pfn = std::get<1>(args);
    int version = std::get<2>(args);
    cuuint64_t flags = std::get<3>(args);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn) {
      // The ceiling's question (wrap_proc_address): the driver's function for `sym` at another version, asked
      // through the very lookup the program called, with its flags.
      struct Ask {
        F real;
        const char* sym;
        cuuint64_t flags;
        static void* at(const void* self, int v) {
          const Ask& q = *static_cast<const Ask*>(self);
          void* p = nullptr;
          CUresult res;
          if constexpr (sizeof...(A) == 5) {
            CUdriverProcAddressQueryResult status;
            res = q.real(q.sym, &p, v, q.flags, &status);
          } else {
            res = q.real(q.sym, &p, v, q.flags);
          }
          return res == CUDA_SUCCESS ? p : nullptr;
        }
      } ask{real, sym, flags};
      void* w = wrap_proc_address(sym, *pfn, version, flags, &Ask::at, &ask);
      if (w) *pfn = w;
    } else {
      // An error, or CUDA_SUCCESS with NULL ("no ABI compatible driver function exists", cuda.h): nothing to wrap.
      if (debug_fd() >= 0)
        log_request("cuGetProcAddress", sym, version, flags,
                    select_entry_point(sym, version, flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), r, false,
                    false, r == CUDA_SUCCESS);
    }
    return r;
  } else if constexpr (k != Kind::StreamInfo && kTakesStream<A...>) {
    // Work on, a wait for, or a query of the stream: its deferred breadcrumb goes first (shim/record/breadcrumbs.h).
    CUstream s = first_stream(a...);
    before_stream_operation(s, kCalls[Id].per_thread);
    CUresult r = real(a...);
    if (__builtin_expect(is_sticky_fault(r), 0)) set_fault_context_hint(stream_context(s, kCalls[Id].per_thread));
    check<Id>(r);
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
           entry_point(id).pfn);
  return nullptr;
}

// CDSA_DEBUG_ENTRY_POINTS=<file>: one line per cuGetProcAddress request and per wrapped-name dlsym, appended
// (tests/e2e/test_real_runtimes.py reads it). Each line:
//   <how> <name> <version> <flags> -> <typedef>|exempt|unknown <wrapped|thunk|passed|not-found:<code>>
// (not-found:0: the driver answered CUDA_SUCCESS with a NULL function)
// where the typedef is the wrapper cdsa selects for the request (also when the driver found nothing; "unknown"
// with "thunk": no wrapper fits, the answer went back through a pass-through thunk, shim/common/passthrough.h).
int debug_fd() {
  static int fd = [] {
    const char* path = config().debug_entry_points;
    if (!*path) return -1;
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f < 0) log_line("CDSA_DEBUG_ENTRY_POINTS=%s: cannot open it for appending; nothing is logged", path);
    return f;
  }();
  return fd;
}

void log_request(const char* how, const char* name, int version, unsigned long long flags, int id, int result,
                 bool wrapped, bool thunk, bool null_answer) {
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

// Which function cdsa hands back for cuGetProcAddress(sym, version, flags), given the driver's answer `real`:
// - a request at or below the table's header version: the wrapper of the newest typedef at or below `version`
//   (the driver's own rule, on the same headers);
// - a request above it: the driver is asked again for `sym` at the header version, through the same lookup and
//   flags. The same pointer back is the same implementation, so the same prototype: the header version's wrapper.
//   A different one (or none) is a version whose prototype the headers do not have (cuLaunchHostFunc at 13010 is
//   cuLaunchHostFunc_v2, with a 4th argument): a wrapper of the old prototype would corrupt its arguments;
// - no wrapper fits (that, or a name the headers lack): a pass-through thunk (shim/common/passthrough.h), never
//   the raw pointer, so cdsa still knows the call was made. Exempt names come back raw.
void* wrap_proc_address(const char* sym, void* real, int version, cuuint64_t flags, AskDriver ask, const void* ctx) {
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

}  // namespace

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
using namespace cdsa;
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
