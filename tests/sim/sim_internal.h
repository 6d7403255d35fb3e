// cdsa simulated CUDA driver (tests only): what the sim's source files share.
//
// build/lib/sim/libcuda.so.1 is a test double for the NVIDIA driver library,
// built from the real CUDA 13 cuda.h signatures. There is no GPU: "device
// memory" is host memory and every stream runs its work in order on its own
// std::thread. README.md holds the contract; each source file holds one area:
//   sim_state.cc    state, sticky errors and the fault text, error table, cuInit, exit, fork
//   sim_streams.cc  streams and their workers, events, stream memory operations
//   sim_kernels.cc  the named kernels and the launch entry points
//   sim_context.cc  device, attributes, contexts
//   sim_memory.cc   allocations, registrations, copies, memsets
//   sim_graphs.cc   stream capture (also into an existing graph) and graphs
//   sim_sched.cc    the seeded scheduler (durations, delays), the fault log, the other SIM_CUDA_* switches
//   sim_modules.cc  modules, libraries, functions, CUkernel handles
//   sim_proc.cc     cuGetProcAddress over the generated entry-point table, and
//                   the answer of every exported name the sim does not implement
//   gen_entry_points.py  generates that table (and the exports) at build time
//                   from the toolkit's cudaTypedefs.h, cuda.h and stub libcuda.so
//
// IMPLEMENTATION NOTES
//  One global mutex guards all state; a worker releases it while it runs a
//  kernel or a copy. Contexts are never freed (their handles stay distinct);
//  what belongs to one carries a CtxRef and is gone with its incarnation.
//  Internal calls never go through exported symbols and the library is
//  linked with -Bsymbolic, so a preloaded interposer never sees the sim
//  calling itself and cuGetProcAddress returns the sim's own functions.
//  Internal names live in namespace sim (hidden visibility).
#ifndef CDSA_TESTS_SIM_SIM_INTERNAL_H
#define CDSA_TESTS_SIM_SIM_INTERNAL_H

#define __CUDA_API_VERSION_INTERNAL 1  // declares every exported variant
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define SIM_API extern "C" __attribute__((visibility("default")))

// Not declared by cuda.h in internal mode (it is a static inline in
// per-thread builds); exported anyway so both names resolve.
extern "C" CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus);

namespace sim {
struct Stream;
}

// A context (CUcontext is its address). Every context the process makes stays allocated (its handle is never
// reused); what it holds goes away when it is destroyed or, for a primary one, reset.
struct CUctx_st {
  enum class State : uint8_t {
    Inactive,  // a primary context not retained, or reset: CUDA_ERROR_CONTEXT_IS_DESTROYED until retained again
    Active,
    Destroyed,  // cuCtxDestroy: CUDA_ERROR_INVALID_CONTEXT to the context calls, 709 where it is still current
  };
  // cuCtxGetId: from one process-wide counter, in order of creation (cuCtxCreate) or activation (a primary
  // context's retain); a primary context made active again after a reset gets a new one. Context-bound objects
  // keep the id they were made under: an object of an older incarnation is gone.
  // id and state change under S().mu but are read without it too (a thread's current context): atomic.
  std::atomic<unsigned long long> id{0};
  int device = 0;
  bool primary = false;
  std::atomic<State> state{State::Inactive};
  std::atomic<int> sticky{0};            // this context's fault (0: none)
  std::vector<std::string> fault_lines;  // the device's assert text, written before `sticky`
  bool text_out = false;                 // the text was printed (guarded by S().mu)
  std::shared_ptr<sim::Stream> legacy;   // this incarnation's legacy NULL stream, made on first use
};

namespace sim {

enum class KernelId { NllLoss, IndexSelect, IllegalAddress, SleepUs, FillF32 };

struct KernelDesc {
  const char* name;
  KernelId id;
  int nparams;
  size_t sizes[5];
  size_t offsets[5];  // natural alignment, as in a CU_LAUNCH_PARAM_BUFFER
  size_t total;
};

constexpr size_t kMaxArgBytes = 64;

constexpr int kNumKernels = 5;
extern const KernelDesc kKernels[kNumKernels];

struct Stream;
using StreamP = std::shared_ptr<Stream>;
using Clock = std::chrono::steady_clock;

// What a context-bound object (stream, event, module, function, graph exec) belongs to: the context and the id of
// its incarnation. The object is gone once that incarnation is (destroyed, or a primary context reset).
struct CtxRef {
  CUctx_st* ctx = nullptr;
  unsigned long long id = 0;
  bool live() const { return ctx != nullptr && ctx->state == CUctx_st::State::Active && ctx->id == id; }
  static CtxRef of(CUctx_st* c) { return CtxRef{c, c != nullptr ? c->id.load() : 0}; }
};

struct Item {
  enum Kind : uint8_t { Kernel, Write32, Write64, Copy, Memset8, Memset32, HostFn, WaitEvent } kind = Kernel;
  const KernelDesc* k = nullptr;
  unsigned char args[kMaxArgBytes] = {};
  uint64_t addr = 0, value = 0;  // memops
  void* dst = nullptr;           // copies and memsets (n bytes / n elements of `value`)
  const void* src = nullptr;
  size_t n = 0;
  CUhostFn fn = nullptr;  // host functions: fn(dst)
  CUfunction func = nullptr;                     // kernels: the handle launched (graph nodes: cuGraphKernelNodeGetParams)
  const char* name = nullptr;  // kernels: the name the handle was got by (interned: never freed)
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared = 0;
  StreamP wait_stream;    // cross-stream wait: until wait_stream->done >= wait_seq
  uint64_t wait_seq = 0;
  // Set when queued (not part of a graph's copy): the item's place on its stream (1, 2, ...) and the earlier items
  // it need not wait for (the scheduler's overlapped PDL primaries, sim_sched.cc; empty without a seed).
  uint64_t seq = 0;
  std::vector<uint64_t> skip;

  template <class T>
  T arg(int i) const {
    T v;
    memcpy(&v, args + k->offsets[i], sizeof(T));
    return v;
  }
};

struct GraphData;

// One node of a graph (CUgraphNode is its address): captured work, or a node added by a graph-building call.
struct GraphNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  Item item;                     // kernel, memcpy, memset, host nodes (and captured memops): what a launch runs
  GraphData* owner = nullptr;    // the graph that holds it
  std::vector<GraphNode*> deps;  // nodes of the same graph it depends on
  // Child graph nodes: one body (a copy of the child graph, owned by the node); conditional nodes: `size` bodies.
  std::vector<std::unique_ptr<GraphData>> bodies;
  CUgraphConditionalHandle cond = 0;
  CUgraphConditionalNodeType cond_type = CU_GRAPH_COND_TYPE_IF;
  bool device_updatable = false;  // CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE
  const GraphNode* cloned_from = nullptr;  // cuGraphClone: the original's node (cuGraphNodeFindInClone)
  void* param_ptrs[5] = {};                // kernel nodes: cuGraphKernelNodeGetParams' kernelParams, into item.args
  CUkernel kern = nullptr;                 // kernel nodes made from a CUkernel (`kern`, func NULL)
  std::vector<CUgraph> body_handles;       // conditional nodes: what phGraph_out points to
};

struct GraphData {
  std::vector<std::unique_ptr<GraphNode>> nodes;  // creation order
  GraphNode* capture_tail = nullptr;              // the last captured node: the next one depends on it
  std::vector<GraphNode*> capture_first_deps;     // cuStreamBeginCaptureToGraph's dependencies, for the first one
  // Filled by cuStreamBeginCaptureToGraph: treated like a conditional node's
  // body, which may not hold memory-operation nodes (checked at instantiation).
  bool captured_to_graph = false;
  // cuStreamBeginRecaptureToGraph (13.3): captured work replaces the existing nodes' work in creation order
  // (`recapture_next`: the next node to replace); work of another node type, or beyond the last node, is a topology
  // mismatch: the capture fails at its end (`recapture_failed`) and the graph is left as far as it got.
  bool recapture = false;
  bool recapture_failed = false;
  size_t recapture_next = 0;
  GraphNode* parent = nullptr;  // a child graph node's or conditional node's body: the node that owns it
};

struct Fault {
  CUresult code = CUDA_SUCCESS;
  std::vector<std::string> lines;
};

// An item a stream's worker started that has not finished: a kernel running its (seeded) duration, a sleep_us, a
// memop waiting its (seeded) delay. Its effect or fault lands at `end`.
struct Running {
  uint64_t seq = 0;
  Clock::time_point end;
  Item item;
  Fault fault;  // kernels: computed at the start, made the context's at `end`
};

struct Stream : std::enable_shared_from_this<Stream> {
  enum Kind { Legacy, PerThread, Created } kind;
  uint64_t id;
  unsigned flags = 0;
  CtxRef ctx;         // the context current when it was made (the legacy and per-thread ones: their context's)
  bool gone = false;  // its context was destroyed or reset: no worker, calls answer CUDA_ERROR_CONTEXT_IS_DESTROYED
  std::deque<Item> q;              // queued, not started (started in this order)
  std::vector<Running> running;    // started, not finished
  std::set<uint64_t> finished_early;  // finished while an earlier item had not (seq > done)
  uint64_t submitted = 0;  // items ever enqueued
  uint64_t done = 0;       // items 1..done finished or discarded
  // The scheduler (with a seed): the overlapped PDL primaries later items need not wait for (cleared by an event
  // record or wait on the stream), and whether the last thing the stream got was a kernel from a launch call.
  std::vector<uint64_t> skip_now;
  bool last_plain_kernel = false;
  std::condition_variable cv;  // the worker waits here: new work, stop, shutdown, its context's fault
  std::thread worker;
  bool started = false;
  bool stop = false;
  bool abort = false;  // the context goes away: discard, cut running work short
  // capture
  bool capturing = false;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capture_thread;
  GraphData* capture = nullptr;              // where captured work goes
  std::unique_ptr<GraphData> capture_owned;  // a new graph (cuStreamBeginCapture), else null
  CUgraph capture_target = nullptr;          // the existing graph (cuStreamBeginCaptureToGraph)
  // CIG capture (cuStreamBeginCaptureToCig, 13.1): the work goes into a graphics command list, which the sim never
  // runs; memory operations, host functions and event records are refused.
  bool cig = false;
  // What the stream was last given (queued items, event records and waits): the PDL oracle's "predecessor".
  enum class LastOp : uint8_t { None, Kernel, Memop, Copy, HostFn, Event, Other } last_op = LastOp::None;

  Stream(Kind k, uint64_t i, CtxRef c, unsigned f = 0) : kind(k), id(i), flags(f), ctx(c) {}
};

struct Event {
  CtxRef ctx;  // the context current at cuEventCreate
  StreamP s;   // null until recorded
  uint64_t seq = 0;
  unsigned flags = 0;
};

// A CUfunction: a module's function, or a CUkernel's in one context (cuKernelGetFunction). Allocated from a pool
// whose freed objects are handed out again: a new function may have an old one's address.
struct Function {
  Function(const KernelDesc* kd, const char* n, CtxRef c) : k(kd), name(n), ctx(c) {}
  const KernelDesc* k;
  const char* name;  // interned
  CtxRef ctx;
};

// A CUkernel (cuLibraryGetKernel): its own handle kind, not a CUfunction, and context-independent (a library needs
// no context). cuLaunchKernel[Ex] accept it cast to CUfunction, as cudart 12+/13 pass it.
struct Kernel {
  Kernel(const KernelDesc* kd, const char* n, CtxRef) : k(kd), name(n) {}
  const KernelDesc* k;
  const char* name;  // interned
  std::vector<Function*> functions;  // cuKernelGetFunction's, one per context incarnation, made on first use
};

// A loaded image: a module (its CUfunctions, in the context current at the load) or a library (its CUkernels, no
// context), by name, each made on first request. `order`: first-request order, in which they are freed.
template <class Named>
struct Image {
  CtxRef ctx;
  std::unordered_map<std::string, Named*> by_name;
  std::vector<Named*> order;
};
using Module = Image<Function>;
using Library = Image<Kernel>;

// Objects whose freed storage is handed out again, the last freed first (a free list), so that a freed handle's
// address comes back for the next object of its kind: what a tool that keeps names by handle must survive. A
// module's functions are freed in the order they were first got, so the same requests in the same order get the
// addresses in reverse (another name at each, but for the middle one of an odd count).
template <class T>
struct Pool {
  std::deque<void*> free;
  template <class... A>
  T* make(A&&... a) {
    void* p;
    if (!free.empty()) {
      p = free.back();
      free.pop_back();
    } else {
      p = ::operator new(sizeof(T));
    }
    return new (p) T(std::forward<A>(a)...);
  }
  void release(T* t) {
    t->~T();
    free.push_back(t);
  }
};

// One node of an executable graph as instantiated, flattened (child graphs and the selected conditional bodies
// inlined) in dependency order.
struct ExecNode {
  const GraphNode* origin = nullptr;  // the graph's node it was instantiated from
  const GraphNode* alias = nullptr;   // after cuGraphExecUpdate: the update graph's node paired with it
  const GraphNode* top = nullptr;     // the top-level node it belongs to (a child graph node, or itself)
  const GraphNode* top_alias = nullptr;
  Item item;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  bool enabled = true;
};

struct GraphExec {
  CtxRef ctx;  // the context current at instantiation (none: calls naming the exec answer the current one's state)
  std::vector<ExecNode> nodes;
};

struct CondHandle {
  unsigned default_value = 0;
  unsigned flags = 0;
};

constexpr int kMaxDevices = 8;

struct Device {
  CUctx_st* primary = nullptr;  // made with the Sim, inactive until retained
  int refs = 0;                 // cuDevicePrimaryCtxRetain minus Release
  unsigned flags = 0;           // cuDevicePrimaryCtxSetFlags
};

struct Sim {
  Sim();
  std::mutex mu;
  std::condition_variable progress;     // any item finished, fault, shutdown
  std::atomic<bool> initialized{false};
  bool shutdown = false;                 // library destructor ran (guarded by mu)

  Device devices[kMaxDevices];
  std::unordered_map<CUcontext, std::unique_ptr<CUctx_st>> contexts;  // every context ever made, never erased
  unsigned long long next_ctx_id = 1;
  bool legacy_id_taken = false;  // stream id 1: device 0's primary context's first legacy stream

  uint64_t next_stream_id = 1000;
  std::unordered_map<CUstream, StreamP> streams;  // created streams (also gone ones, until destroyed)
  std::vector<StreamP> per_thread;                // never freed (threads hold raw pointers)
  int capturing = 0;                              // streams capturing now

  std::unordered_map<CUevent, std::unique_ptr<Event>> events;
  std::map<uintptr_t, size_t> allocs;      // cuMemAlloc: base -> bytes
  std::map<uintptr_t, size_t> registered;  // cuMemHostRegister: base -> bytes
  std::unordered_map<CUmodule, std::unique_ptr<Module>> modules;
  std::unordered_set<const Function*> functions;  // live ones
  std::unordered_map<CUlibrary, std::unique_ptr<Library>> libraries;
  std::unordered_set<const Kernel*> kernels;      // live ones
  Pool<Function> function_pool;
  Pool<Kernel> kernel_pool;
  std::unordered_set<std::string> names;  // interned kernel names (Item::name, Function::name), never freed
  std::unordered_map<CUgraph, std::unique_ptr<GraphData>> graphs;
  std::unordered_map<CUgraphExec, std::unique_ptr<GraphExec>> execs;
  std::unordered_map<CUgraph, GraphData*> bodies;       // graphs owned by a node (child, conditional bodies)
  std::unordered_map<CUgraphNode, GraphNode*> nodes;    // every live node of every graph
  std::unordered_map<CUgraphConditionalHandle, CondHandle> conds;
  CUgraphConditionalHandle next_cond = 1;
};

using Lock = std::unique_lock<std::mutex>;

// Never destroyed: other libraries' exit handlers may call in at any time.
Sim& S();
extern thread_local CUcontext t_current;

// ---- state (sim_state.cc)
// Which context's state a call answers: the object's it names (stream, event, graph exec, module, function,
// context), else the calling thread's current one. Neither `observe` nor the prologues may be called with S().mu
// held (the first call that sees a context's fault prints its text, as libcuda does).
CUresult observe(CUctx_st* c);  // c's sticky error, if any (the first caller prints the text); null: none
CUresult enter();             // initialised, then the current context's sticky error
CUresult enter_ctx();         // enter(), then a current context that is active
CUresult finish(CUresult r);  // cleanup calls: the current context's sticky error over r
CUresult finish_in(CUctx_st* c, CUresult r);  // cleanup calls on an object of context c
inline bool initialized() { return S().initialized.load(std::memory_order_acquire); }
// The current context's answer to calls that need one: none -> CUDA_ERROR_INVALID_CONTEXT, inactive or destroyed
// -> CUDA_ERROR_CONTEXT_IS_DESTROYED.
CUresult current_ctx_check(CUctx_st* c);
const char* intern_locked(const std::string& name);

// The object behind `handle` in `table` (the caller holds S().mu), or null: the caller answers
// CUDA_ERROR_INVALID_HANDLE (or what its contract says).
template <class Map>
typename Map::mapped_type::element_type* find_locked(Map Sim::*table, typename Map::key_type handle) {
  auto it = (S().*table).find(handle);
  return it == (S().*table).end() ? nullptr : it->second.get();
}

// The context whose state a call naming `handle` answers: the object's, if it names one and carries a context,
// else the calling thread's current one. Takes S().mu.
template <class Map>
CUctx_st* ctx_of(Map Sim::*table, typename Map::key_type handle) {
  Lock lk(S().mu);
  auto* o = find_locked(table, handle);
  return o != nullptr && o->ctx.ctx != nullptr ? o->ctx.ctx : t_current;
}

// The cu*Create calls, after their argument checks: the new object goes into `table` under its own address, which is
// the handle returned. adopt_locked: the caller holds S().mu; create_handle takes it and calls `make` under it.
template <class Map, class Ptr>
typename Map::key_type adopt_locked(Map Sim::*table, Ptr object) {
  const auto handle = reinterpret_cast<typename Map::key_type>(object.get());
  return (S().*table).try_emplace(handle, std::move(object)).first->first;  // a live object's address is new
}
template <class Map, class Make>
CUresult create_handle(Map Sim::*table, typename Map::key_type* out, Make make) {
  Lock lk(S().mu);
  *out = adopt_locked(table, make());
  return CUDA_SUCCESS;
}
template <class Map>
CUresult create_handle(Map Sim::*table, typename Map::key_type* out) {  // a default-made object
  return create_handle(table, out, [] { return std::make_unique<typename Map::mapped_type::element_type>(); });
}

// The simple queries: `gate` (enter, or enter_ctx where a current context is required), then a null `out` is
// CUDA_ERROR_INVALID_VALUE, then `refusal` (what the other arguments are wrong in, if anything); else *out = value.
template <class T>
CUresult answer(T* out, std::type_identity_t<T> value, CUresult refusal = CUDA_SUCCESS, CUresult (*gate)() = enter) {
  CUresult r = gate();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (refusal != CUDA_SUCCESS) return refusal;
  *out = value;
  return CUDA_SUCCESS;
}

// The cu*Destroy / cu*Unload calls: takes the object for `handle` out of `table` under the lock and destroys it
// after (queued items refer to static descriptions only). `refuse(g, handle)` may keep it (an error to return, else
// CUDA_SUCCESS); `forget(g, object)` takes what it holds out of the other tables. The answer: the sticky error of
// the object's context (else the current one's) over the result.
struct ForgetNothing {
  template <class... A>
  void operator()(A&&...) const {}
};
struct RefuseNothing {
  template <class... A>
  CUresult operator()(A&&...) const {
    return CUDA_SUCCESS;
  }
};
template <class Map, class Forget = ForgetNothing, class Refuse = RefuseNothing>
CUresult destroy_handle(Map Sim::*table, typename Map::key_type handle, Forget forget = {}, Refuse refuse = {}) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  typename Map::mapped_type victim;
  CUresult r = CUDA_SUCCESS;
  CUctx_st* ctx = t_current;
  {
    Lock lk(g.mu);
    auto it = (g.*table).find(handle);
    if (it == (g.*table).end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else if ((r = refuse(g, handle)) == CUDA_SUCCESS) {
      victim = std::move(it->second);
      (g.*table).erase(it);
      if constexpr (requires { victim->ctx.ctx; })
        if (victim->ctx.ctx != nullptr) ctx = victim->ctx.ctx;
      forget(g, *victim);
    }
  }
  victim.reset();
  return finish_in(ctx, r);
}
// A kernel (or memop) faulted on `s`: appended to the fault log (SIM_CUDA_FAULT_LOG), and, if the stream's context
// is alive and has no fault yet, made its sticky error (its queued work is then discarded).
void set_fault_locked(Stream& s, Fault f, const Item& it);
void stop_worker(Lock& lk, Stream& s);
void wake_streams_of_locked(const CUctx_st* c);  // their workers look at the context's state again

// ---- streams (sim_streams.cc)
void worker_main(StreamP sp);
StreamP legacy_locked(CUctx_st* c);      // c's legacy stream, made on first use
StreamP per_thread_locked(CUctx_st* c);  // the calling thread's per-thread stream in c
// The stream `h` names: a created stream (gone: CUDA_ERROR_CONTEXT_IS_DESTROYED), or the legacy / per-thread one
// of the current context (see current_ctx_check). `ptsz`: a _ptsz/_ptds entry point (NULL is the per-thread one).
CUresult resolve_locked(CUstream h, bool ptsz, StreamP& out);
// Queues `it` on `s`; `programmatic`: a launch with programmatic stream serialization (the scheduler may start it
// beside the kernel before it).
CUresult enqueue_locked(Stream& s, Item&& it, bool programmatic = false);
// The stream calls' common path: initialised; under S().mu the stream resolved (if that fails: the current
// context's sticky error, else the failure), then its context's sticky error, then CUDA_ERROR_INVALID_VALUE unless
// `args_ok`, then `act` (a StreamP -> CUresult, under the lock), whose answer is returned.
template <class Act>
CUresult on_stream(CUstream h, bool ptsz, bool args_ok, Act act) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Lock lk(S().mu);
  StreamP s;
  CUresult r = resolve_locked(h, ptsz, s);
  if (r != CUDA_SUCCESS) {
    lk.unlock();
    CUresult e = enter();
    return e != CUDA_SUCCESS ? e : r;
  }
  if (s->ctx.ctx->sticky.load(std::memory_order_acquire) != 0) {
    lk.unlock();
    return observe(s->ctx.ctx);
  }
  if (!args_ok) return CUDA_ERROR_INVALID_VALUE;
  return act(s);
}
// Queues on the stream, or appends to its capture. `plain_kernel`: a kernel from a launch call (not a graph).
CUresult submit_locked(Stream& s, Item&& it, bool programmatic = false, bool plain_kernel = false);
// An event record or wait on `s`: later work on it waits for everything before (the scheduler's barrier).
void barrier_locked(Stream& s);
// The PDL oracle (SIM_CUDA_PDL_LOG): a launch with programmatic stream serialization is about to be queued on `s`;
// appends "<stream id> kept|lost <predecessor>" (lost: the stream's previous operation is not a kernel).
void note_pdl_launch_locked(const Stream& s);
void wait_stream_locked(Lock& lk, const StreamP& s, uint64_t seq);
void wait_stream_locked(Lock& lk, const StreamP& s);
// The streams of context c's live incarnation (c null: every stream), with what each was given so far.
std::vector<std::pair<StreamP, uint64_t>> streams_of_locked(const CUctx_st* c);
void wait_all_locked(Lock& lk, const CUctx_st* c = nullptr);  // all work submitted so far on those streams
// A synchronizing call on context c (cuCtxSynchronize, cuMemcpy, cuMemset*; null: no context, every stream): waits
// for c's streams, unless a capture is under way; then c's sticky error, else CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// during a capture, else CUDA_SUCCESS.
CUresult synchronize_ctx(CUctx_st* c);

// ---- the scheduler (sim_sched.cc)
// SIM_CUDA_SCHED_SEED=<n>: on; unset or empty: off (every item runs at once, in order, as before).
bool sched_on();
// With a seed: how long item `seq` of stream `stream_id` takes (kernels) or waits before it lands (memops), in
// microseconds, in [0, SIM_CUDA_SCHED_MAX_US] (default 2000); 0 without a seed. A function of the seed and the
// item's place only.
int64_t sched_delay_us(uint64_t stream_id, uint64_t seq);
// SIM_CUDA_FAULT_LOG=<file>: "<context id> <stream id> <kernel name> grid <x> <y> <z> <code>" per fault.
void log_fault(unsigned long long ctx_id, uint64_t stream_id, const Item& it, CUresult code);
// SIM_CUDA_CTX_CURRENT_AFTER_FAULT=ok: cuCtxGetCurrent answers no sticky error; fail (default): the current
// context's.
bool ctx_current_ok_after_fault();
// SIM_CUDA_ASSERT_BLOCK=last: an assert line names the launch's last block (README.md, "Kernels"); zero or unset: [0,0,0].
bool assert_block_last();
int device_count();  // SIM_CUDA_DEVICES=<1..8>, default 1

// ---- kernels (sim_kernels.cc)
Fault run_kernel(const Item& it);  // any kernel but sleep_us; no lock held

// ---- memory (sim_memory.cc)
bool in_range(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n);
bool memop_target_ok_locked(uintptr_t p, size_t n);
void fill_memory(void* dst, uint64_t value, size_t n, bool is32);

// ---- context (sim_context.cc)
bool no_64bit_memops();  // SIM_CUDA_NO_64BIT_MEMOPS=1: attribute 122 is 0, 64-bit memops fail
// Context teardown (cuCtxDestroy, a primary context's last release or reset): waits for its streams' work, stops
// their workers, frees its modules and functions (their addresses go back to the pools), forgets its fault, and
// leaves it `to` (Destroyed or Inactive).
void teardown_ctx_locked(Lock& lk, CUctx_st* c, CUctx_st::State to);
// SIM_CUDA_TEARDOWN_AT_EXIT=1: cuInit registers an exit handler that resets every device's primary context the
// driver's own way (no exported entry point, so no interposer sees it), as a driver or runtime torn down by its
// own exit path before a later handler runs. Read once.
void arm_teardown_at_exit();
// ---- versions (sim_proc.cc)
// SIM_CUDA_DRIVER_VERSION=<n> (default: kDefaultDriverVersion): what cuDriverGetVersion answers; cuGetProcAddress
// hides the rows newer than it and refuses requests above it.
int driver_version();
// The headers' CUDA_VERSION in build/lib/sim; the toolkit stub's version in build/lib/sim-stub, the sim as an older
// driver that exports only the stub's names (sim_version.cc, compiled once per library).
extern const int kDefaultDriverVersion;
// The test-only entry point newer than every header (sim_kernels.cc): cuLaunchKernel at 13990.
CUresult future_launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra,
                              unsigned int futureCheck);

CUresult pack_args(const KernelDesc& k, void** params, void** extra, Item& it);  // kernelParams or extra

// ---- modules (sim_modules.cc)
const KernelDesc* find_kernel_desc(const char* name);  // exact, else the longest contained kernel name
// A live CUfunction, or a CUkernel cast to one: its description and name (and, for a CUfunction, its context in
// *ctx; a CUkernel's is null); else null.
const KernelDesc* launchable_locked(CUfunction f, const char** name = nullptr, CtxRef* ctx = nullptr);
void free_ctx_functions_locked(const CUctx_st* c);  // the modules and cuKernelGetFunction functions of c's incarnation

// ---- graphs (sim_graphs.cc)
void end_capture_locked(Stream& s);  // drops a capture (cuStreamDestroy)
void capture_item_locked(GraphData& g, Item&& it);  // appends captured work, depending on the last captured node

}  // namespace sim

#endif  // CDSA_TESTS_SIM_SIM_INTERNAL_H
