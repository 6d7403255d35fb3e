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
//   sim_modules.cc  modules, libraries, functions, CUkernel handles
//   sim_proc.cc     cuGetProcAddress over the generated entry-point table, and
//                   the answer of every exported name the sim does not implement
//   gen_entry_points.py  generates that table (and the exports) at build time
//                   from the toolkit's cudaTypedefs.h, cuda.h and stub libcuda.so
//
// IMPLEMENTATION NOTES
//  One global mutex guards all state; a worker releases it while it runs a
//  kernel or a copy. Internal calls never go through exported symbols and
//  the library is linked with -Bsymbolic, so a preloaded interposer never
//  sees the sim calling itself and cuGetProcAddress returns the sim's own
//  functions. Internal names live in namespace sim (hidden visibility).
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

struct CUctx_st {
  int id;  // cuCtxGetId: 1 for the primary context, 2, 3, ... for cuCtxCreate's
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
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared = 0;
  StreamP wait_stream;    // cross-stream wait: until wait_stream->done >= wait_seq
  uint64_t wait_seq = 0;

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
  GraphNode* parent = nullptr;  // a child graph node's or conditional node's body: the node that owns it
};

struct Stream : std::enable_shared_from_this<Stream> {
  enum Kind { Legacy, PerThread, Created } kind;
  uint64_t id;
  unsigned flags = 0;
  std::deque<Item> q;
  uint64_t submitted = 0;  // items ever enqueued
  uint64_t done = 0;       // items finished or discarded (in order)
  std::condition_variable cv;
  std::thread worker;
  bool started = false;
  bool stop = false;
  // capture
  bool capturing = false;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capture_thread;
  GraphData* capture = nullptr;              // where captured work goes
  std::unique_ptr<GraphData> capture_owned;  // a new graph (cuStreamBeginCapture), else null
  CUgraph capture_target = nullptr;          // the existing graph (cuStreamBeginCaptureToGraph)
  // What the stream was last given (queued items, event records and waits): the PDL oracle's "predecessor".
  enum class LastOp : uint8_t { None, Kernel, Memop, Copy, HostFn, Event, Other } last_op = LastOp::None;

  Stream(Kind k, uint64_t i, unsigned f = 0) : kind(k), id(i), flags(f) {}
};

struct Event {
  StreamP s;  // null until recorded
  uint64_t seq = 0;
  unsigned flags = 0;
};

struct Function {
  Function(const KernelDesc* kd, std::string n) : k(kd), name(std::move(n)) {}
  const KernelDesc* k;
  std::string name;
};

// A CUkernel (cuLibraryGetKernel): its own handle kind, not a CUfunction.
// cuLaunchKernel[Ex] accept it cast to CUfunction, as cudart 12+/13 pass it.
struct Kernel {
  Kernel(const KernelDesc* kd, std::string n) : k(kd), name(std::move(n)) {}
  const KernelDesc* k;
  std::string name;
  std::unique_ptr<Function> function;  // cuKernelGetFunction's, made on first use
};

// A loaded image: a module (its CUfunctions) or a library (its CUkernels), by name, each made on first request.
template <class Named>
struct Image {
  std::unordered_map<std::string, std::unique_ptr<Named>> by_name;
};
using Module = Image<Function>;
using Library = Image<Kernel>;

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
  std::vector<ExecNode> nodes;
};

struct CondHandle {
  unsigned default_value = 0;
  unsigned flags = 0;
};

struct Sim {
  std::mutex mu;
  std::condition_variable progress;     // any item finished, fault, shutdown
  std::condition_variable shutdown_cv;  // interrupts sleep_us at exit
  std::atomic<bool> initialized{false};
  std::atomic<bool> torn_down{false};  // cuDevicePrimaryCtxReset: every later call answers CUDA_ERROR_DEINITIALIZED
  std::atomic<int> sticky{0};
  bool dead = false;                     // a fault happened (guarded by mu)
  bool shutdown = false;                 // library destructor ran (guarded by mu)
  std::vector<std::string> fault_lines;  // written once, before sticky
  std::once_flag report_once;

  uint64_t next_stream_id = 1000;
  StreamP legacy = std::make_shared<Stream>(Stream::Legacy, 1);
  std::unordered_map<CUstream, StreamP> streams;  // created streams
  std::vector<StreamP> per_thread;                // never destroyed
  int capturing = 0;                              // streams capturing now

  std::unordered_map<CUevent, std::unique_ptr<Event>> events;
  std::map<uintptr_t, size_t> allocs;      // cuMemAlloc: base -> bytes
  std::map<uintptr_t, size_t> registered;  // cuMemHostRegister: base -> bytes
  std::unordered_map<CUmodule, std::unique_ptr<Module>> modules;
  std::unordered_set<const Function*> functions;
  std::unordered_map<CUlibrary, std::unique_ptr<Library>> libraries;
  std::unordered_set<const Kernel*> kernels;
  std::unordered_map<CUgraph, std::unique_ptr<GraphData>> graphs;
  std::unordered_map<CUgraphExec, std::unique_ptr<GraphExec>> execs;
  std::unordered_map<CUgraph, GraphData*> bodies;       // graphs owned by a node (child, conditional bodies)
  std::unordered_map<CUgraphNode, GraphNode*> nodes;    // every live node of every graph
  std::unordered_map<CUgraphConditionalHandle, CondHandle> conds;
  CUgraphConditionalHandle next_cond = 1;
  int primary_refs = 0;
  CUctx_st primary{1};
  std::unordered_map<CUcontext, std::unique_ptr<CUctx_st>> contexts;  // cuCtxCreate's
  int next_ctx_id = 2;
};

using Lock = std::unique_lock<std::mutex>;

// Never destroyed: other libraries' exit handlers may call in at any time.
Sim& S();
extern thread_local CUcontext t_current;
extern thread_local Stream* t_per_thread;

// ---- state (sim_state.cc)
CUresult sticky_result();     // the sticky error, if any; the first caller prints the text. Not under S().mu.
CUresult enter();             // initialised, then sticky
CUresult enter_ctx();         // enter(), then a current context
CUresult finish(CUresult r);  // cleanup calls: sticky over r

// The object behind `handle` in `table` (the caller holds S().mu), or null: the caller answers
// CUDA_ERROR_INVALID_HANDLE (or what its contract says).
template <class Map>
typename Map::mapped_type::element_type* find_locked(Map Sim::*table, typename Map::key_type handle) {
  auto it = (S().*table).find(handle);
  return it == (S().*table).end() ? nullptr : it->second.get();
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
// CUDA_SUCCESS); `forget(g, object)` takes what it holds out of the other tables.
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
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  typename Map::mapped_type victim;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    auto it = (g.*table).find(handle);
    if (it == (g.*table).end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else if ((r = refuse(g, handle)) == CUDA_SUCCESS) {
      victim = std::move(it->second);
      (g.*table).erase(it);
      forget(g, *victim);
    }
  }
  victim.reset();
  return finish(r);
}
void set_fault_locked(CUresult code, std::vector<std::string> lines);
void stop_worker(Lock& lk, Stream& s);

// ---- streams (sim_streams.cc)
void worker_main(StreamP sp);
StreamP per_thread_locked();
CUresult resolve_locked(CUstream h, bool ptsz, StreamP& out);  // ptsz: a _ptsz/_ptds entry point
CUresult enqueue_locked(Stream& s, Item&& it);
// The stream calls' common path: enter(), then CUDA_ERROR_INVALID_VALUE unless `args_ok`, then under S().mu the
// stream resolved and handed to `act` (a StreamP -> CUresult), whose answer is returned.
template <class Act>
CUresult on_stream(CUstream h, bool ptsz, bool args_ok, Act act) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (!args_ok) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  return act(s);
}
CUresult submit_locked(Stream& s, Item&& it);  // queues, or appends to the stream's capture
// The PDL oracle (SIM_CUDA_PDL_LOG): a launch with programmatic stream serialization is about to be queued on `s`;
// appends "<stream id> kept|lost <predecessor>" (lost: the stream's previous operation is not a kernel).
void note_pdl_launch_locked(const Stream& s);
void wait_stream_locked(Lock& lk, const StreamP& s, uint64_t seq);
void wait_stream_locked(Lock& lk, const StreamP& s);
std::vector<std::pair<StreamP, uint64_t>> all_streams_locked();
void wait_all_locked(Lock& lk);  // all work submitted so far on every stream
// A synchronizing call (cuCtxSynchronize, cuMemcpy, cuMemset*): waits for every stream, unless a capture is under
// way; then the sticky error, else CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED during a capture, else CUDA_SUCCESS.
CUresult synchronize_all();

// ---- kernels (sim_kernels.cc)
struct Fault {
  CUresult code = CUDA_SUCCESS;
  std::vector<std::string> lines;
};
Fault run_kernel(const Item& it);  // any kernel but sleep_us; no lock held

// ---- memory (sim_memory.cc)
bool in_range(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n);
bool memop_target_ok_locked(uintptr_t p, size_t n);
void fill_memory(void* dst, uint64_t value, size_t n, bool is32);

// ---- context (sim_context.cc)
bool no_64bit_memops();  // SIM_CUDA_NO_64BIT_MEMOPS=1: attribute 122 is 0, 64-bit memops fail
// ---- versions (sim_proc.cc)
// SIM_CUDA_DRIVER_VERSION=<n> (default: the headers' CUDA_VERSION): what cuDriverGetVersion answers; cuGetProcAddress
// hides the rows newer than it and refuses requests above it.
int driver_version();
// The test-only entry point newer than every header (sim_kernels.cc): cuLaunchKernel at 13990.
CUresult future_launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra,
                              unsigned int futureCheck);

CUresult pack_args(const KernelDesc& k, void** params, void** extra, Item& it);  // kernelParams or extra

// ---- modules (sim_modules.cc)
const KernelDesc* find_kernel_desc(const char* name);  // exact, else the longest contained kernel name
const KernelDesc* launchable_locked(CUfunction f);     // a CUfunction, or a CUkernel cast to one; else null

// ---- graphs (sim_graphs.cc)
void end_capture_locked(Stream& s);  // drops a capture (cuStreamDestroy)
void capture_item_locked(GraphData& g, Item&& it);  // appends captured work, depending on the last captured node

}  // namespace sim

#endif  // CDSA_TESTS_SIM_SIM_INTERNAL_H
