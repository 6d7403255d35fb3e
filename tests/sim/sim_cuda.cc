// cdsa simulated CUDA driver: build/lib/sim/libcuda.so.1 (tests only).
//
// A test double for libcuda.so.1 built from the real CUDA 13.0 cuda.h
// signatures. There is no GPU: "device memory" is host memory and every
// stream runs its work in order on its own std::thread. It lets the cdsa
// preload library and its tests run the whole launch -> fault -> report flow
// on CPUs. See tests/sim/README.md for the same text in prose.
//
// CONTRACT SUMMARY
//  * One device (ordinal 0, "cdsa simulated GPU", cc 9.0, 132 SMs), one
//    primary context (cuCtxGetId == 1). cuDriverGetVersion == 13000.
//  * Calls before cuInit -> CUDA_ERROR_NOT_INITIALIZED (except cuGetErrorName,
//    cuGetErrorString, cuDriverGetVersion, cuGetProcAddress[_v2]).
//  * Launches (cuLaunchKernel[Ex], cuLaunchCooperativeKernel, cuGraphLaunch)
//    and creations (cuMemAlloc, cuStreamCreate, cuEventCreate,
//    cuModuleLoadData) need a current context -> else
//    CUDA_ERROR_INVALID_CONTEXT. Queries, syncs and memcpys do not.
//  * Kernels (cuModuleLoadData accepts any image; cuModuleGetFunction matches
//    the exact name, or else a name that contains one of these; cuFuncGetName
//    returns the name as given):
//      nll_loss_forward_reduce_cuda_kernel_2d(float* out, const int64_t* target,
//          int32_t n, int32_t n_classes, int64_t ignore_index)
//        first i with target[i] != ignore_index && !(0 <= t < n_classes):
//        710 + "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block:
//        [0,0,0], thread: [i,0,0] Assertion `t >= 0 && t < n_classes` failed."
//        else out[0] = (float)(number of non-ignored targets).
//      indexSelectSmallIndex(float* out, const int64_t* index, int32_t n,
//          int32_t src_size)
//        one line per i with !(0 <= index[i] < src_size):
//        "Indexing.cu:1231: indexSelectSmallIndex: block: [0,0,0], thread:
//        [i,0,0] Assertion `srcIndex < srcSelectDimSize` failed." then 710;
//        else out[i] = (float)index[i].
//      illegal_address()            -> 700, no text.
//      sleep_us(int64_t us)         -> keeps its stream busy that long.
//      fill_f32(float* p, int32_t n, float v) -> p[0..n) = v.
//    A NULL pointer that a kernel would dereference -> 700.
//  * Sticky errors: the first fault makes every later call of every thread
//    return its code (700 CUDA_ERROR_ILLEGAL_ADDRESS / 710 CUDA_ERROR_ASSERT),
//    except cuGetErrorName/String, cuDriverGetVersion, cuGetProcAddress[_v2].
//    Waiting calls (sync memcpy, cuCtx/Stream/EventSynchronize) wait first,
//    then return it; non-waiting calls return it only if the fault has
//    already happened. Cleanup calls (cuStreamDestroy, cuEventDestroy,
//    cuMemFree, cuMemHostUnregister, cuModuleUnload, cuGraph[Exec]Destroy)
//    still release the object, then return the sticky code.
//    The assert text lines are written to fd 2 with write(2), each ending in
//    "\n", exactly once per process, by the first call that returns the
//    sticky error, before it returns. After a fault the context is dead:
//    workers discard every item that has not started yet, on every stream
//    (a running sleep_us finishes, nothing after it runs).
//  * Streams: created streams get ids 1000, 1001, ... (never reused). The
//    legacy stream (NULL to a non-_ptsz entry point, or CU_STREAM_LEGACY) has
//    id 1. CU_STREAM_PER_THREAD, or NULL to a _ptsz/_ptds entry point, is the
//    calling thread's per-thread stream: its own worker and its own id, taken
//    from the same counter as created streams on the thread's first use; it
//    lives until process exit. No implicit synchronisation between the legacy
//    stream and other streams. Workers are std::threads started on a stream's
//    first item; cuStreamDestroy waits for the stream's queued work, then
//    joins its worker.
//  * Events: cuEventRecord marks "all work submitted so far on that stream";
//    cuEventQuery/Synchronize check/wait for it; cuStreamWaitEvent makes later
//    work on a stream wait for it. Never-recorded events are complete.
//  * Memory: cuMemAlloc returns zeroed host memory (256-byte aligned).
//    cuMemFree and cuMemHostUnregister first wait for all streams.
//    cuMemcpyHtoD/DtoH (and _ptds) wait for all streams, then copy (no copy
//    if the context is dead); the Async versions are queued on the stream.
//    cuMemHostRegister records the range (overlap ->
//    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); cuMemHostGetDevicePointer
//    returns the host address itself. cuStreamWriteValue32/64 need the
//    (aligned) target inside a registered range or a cuMemAlloc block, else
//    CUDA_ERROR_INVALID_VALUE; the worker performs an atomic release store in
//    stream order.
//  * Graphs: while a stream captures, launches, memops, async memcpys and graph
//    launches on it are appended to the capture (kernel arguments copied by
//    value) and return CUDA_SUCCESS; event record/wait on a capturing stream
//    are accepted and ignored. Waiting calls on a capturing stream (or any
//    device-wide wait while any stream captures) return
//    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; the capture is not invalidated.
//    Capture on the legacy stream -> CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
//    cuGraphLaunch enqueues the nodes, in capture order, on the stream.
//  * cuGetProcAddress[_v2] accepts base names ("cuMemAlloc") and exported
//    names ("cuMemAlloc_v2"), returns the newest version (per-thread variant
//    with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), except the ABI
//    changes cuGraphInstantiate (<12000: 5-arg _v2), cuGetProcAddress
//    (<12000: 4-arg) and cuStreamBeginCapture (<10010: 1-arg).
//  * Also implemented: cuMemcpy, cuMemcpyDtoD, cuMemsetD8/D32 (synchronous:
//    wait for all streams like cuMemcpyHtoD) and their Async forms, cuMemGetInfo,
//    cuLaunchHostFunc (runs on the stream's worker; discarded after a fault),
//    cuCtxPushCurrent/PopCurrent, cuDeviceTotalMem, cuDevicePrimaryCtxGetState,
//    cuCtxGetDevice, cuStreamCreateWithPriority, cuEventRecordWithFlags, and
//    each one's _v2/_ptsz/_ptds exported names.
//  * fork(): the child gets a working sim; work queued before the fork
//    counts as finished there (it belongs to the parent).
//  * Exit: a library destructor stops the workers (queued work is discarded,
//    running sleeps are cut short, workers are joined). State is never freed,
//    so calls made after that (other libraries' exit handlers) still work:
//    work they queue is discarded, waits return at once.
//
// IMPLEMENTATION NOTES
//  One global mutex guards all state; a worker releases it while it runs a
//  kernel or a copy. Internal calls never go through exported symbols and
//  the library is linked with -Bsymbolic, so a preloaded interposer never
//  sees the sim calling itself and cuGetProcAddress returns the sim's own
//  functions.

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
#include <unordered_map>
#include <unordered_set>
#include <vector>

#define SIM_API extern "C" __attribute__((visibility("default")))

// Not declared by cuda.h in internal mode (it is a static inline in
// per-thread builds); exported anyway so both names resolve.
extern "C" CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus);

struct CUctx_st {
  int unused;
};

namespace {

// ---------------------------------------------------------------- kernels

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

const KernelDesc kKernels[] = {
    {"nll_loss_forward_reduce_cuda_kernel_2d", KernelId::NllLoss, 5, {8, 8, 4, 4, 8}, {0, 8, 16, 20, 24}, 32},
    {"indexSelectSmallIndex", KernelId::IndexSelect, 4, {8, 8, 4, 4}, {0, 8, 16, 20}, 24},
    {"illegal_address", KernelId::IllegalAddress, 0, {}, {}, 0},
    {"sleep_us", KernelId::SleepUs, 1, {8}, {0}, 8},
    {"fill_f32", KernelId::FillF32, 3, {8, 4, 4}, {0, 8, 12}, 16},
};

// ---------------------------------------------------------------- state

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
  StreamP wait_stream;    // cross-stream wait: until wait_stream->done >= wait_seq
  uint64_t wait_seq = 0;

  template <class T>
  T arg(int i) const {
    T v;
    memcpy(&v, args + k->offsets[i], sizeof(T));
    return v;
  }
};

struct GraphData {
  std::vector<Item> nodes;
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
  std::unique_ptr<GraphData> capture;

  Stream(Kind k, uint64_t i) : kind(k), id(i) {}
};

struct Event {
  StreamP s;  // null until recorded
  uint64_t seq = 0;
  unsigned flags = 0;
};

struct Function {
  const KernelDesc* k;
  std::string name;
};

struct Module {
  std::unordered_map<std::string, std::unique_ptr<Function>> functions;
};

struct GraphExec {
  std::vector<Item> nodes;
};

struct Sim {
  std::mutex mu;
  std::condition_variable progress;     // any item finished, fault, shutdown
  std::condition_variable shutdown_cv;  // interrupts sleep_us at exit
  std::atomic<bool> initialized{false};
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
  std::unordered_map<CUgraph, std::unique_ptr<GraphData>> graphs;
  std::unordered_map<CUgraphExec, std::unique_ptr<GraphExec>> execs;
  int primary_refs = 0;
  CUctx_st primary{0};
};

// Never destroyed: other libraries' exit handlers may call in at any time.
void atfork_prepare();
void atfork_parent();
void atfork_child();

Sim& S() {
  static Sim* s = [] {
    auto* p = new Sim;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    return p;
  }();
  return *s;
}

thread_local CUcontext t_current = nullptr;
thread_local Stream* t_per_thread = nullptr;

using Lock = std::unique_lock<std::mutex>;

// ---------------------------------------------------------------- errors

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
}

// The sticky error, if any; the first caller that gets it prints the text.
// Never call with S().mu held.
CUresult sticky_result() {
  Sim& g = S();
  int e = g.sticky.load(std::memory_order_acquire);
  if (e == 0) return CUDA_SUCCESS;
  std::call_once(g.report_once, [&g] {
    for (const std::string& line : g.fault_lines) write_all(2, line + "\n");
  });
  return static_cast<CUresult>(e);
}

// Common prologue: initialised, then sticky.
CUresult enter() {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  return sticky_result();
}

// Prologue for calls that need a current context.
CUresult enter_ctx() {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

// For cleanup calls: the object was released; report sticky over success.
CUresult finish(CUresult r) {
  CUresult e = sticky_result();
  return e != CUDA_SUCCESS ? e : r;
}

void set_fault_locked(CUresult code, std::vector<std::string> lines) {
  Sim& g = S();
  if (g.dead) return;
  g.fault_lines = std::move(lines);
  g.dead = true;
  g.sticky.store(code, std::memory_order_release);
  g.progress.notify_all();
}

// ---------------------------------------------------------------- streams

void worker_main(StreamP sp);

StreamP per_thread_locked() {
  Sim& g = S();
  if (t_per_thread == nullptr) {
    auto s = std::make_shared<Stream>(Stream::PerThread, g.next_stream_id++);
    g.per_thread.push_back(s);
    t_per_thread = s.get();
    return s;
  }
  return t_per_thread->shared_from_this();
}

// Resolves a stream handle; `ptsz` says the entry point is a _ptsz/_ptds one.
CUresult resolve_locked(CUstream h, bool ptsz, StreamP& out) {
  Sim& g = S();
  if (h == nullptr) h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY) {
    out = g.legacy;
    return CUDA_SUCCESS;
  }
  if (h == CU_STREAM_PER_THREAD) {
    out = per_thread_locked();
    return CUDA_SUCCESS;
  }
  auto it = g.streams.find(h);
  if (it == g.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  out = it->second;
  return CUDA_SUCCESS;
}

CUresult enqueue_locked(Stream& s, Item&& it) {
  Sim& g = S();
  if (g.shutdown) {  // workers are gone: discard
    ++s.submitted;
    ++s.done;
    return CUDA_SUCCESS;
  }
  if (!s.started) {
    try {
      s.worker = std::thread(worker_main, s.shared_from_this());
    } catch (...) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s.started = true;
  }
  ++s.submitted;
  s.q.push_back(std::move(it));
  s.cv.notify_one();
  return CUDA_SUCCESS;
}

// Queues on the stream, or appends to its capture.
CUresult submit_locked(Stream& s, Item&& it) {
  if (s.capturing) {
    s.capture->nodes.push_back(std::move(it));
    return CUDA_SUCCESS;
  }
  return enqueue_locked(s, std::move(it));
}

void wait_stream_locked(Lock& lk, const StreamP& s, uint64_t seq) {
  S().progress.wait(lk, [&] { return s->done >= seq; });
}

void wait_stream_locked(Lock& lk, const StreamP& s) { wait_stream_locked(lk, s, s->submitted); }

std::vector<std::pair<StreamP, uint64_t>> all_streams_locked() {
  Sim& g = S();
  std::vector<std::pair<StreamP, uint64_t>> v;
  v.reserve(g.streams.size() + g.per_thread.size() + 1);
  v.emplace_back(g.legacy, g.legacy->submitted);
  for (auto& [h, s] : g.streams) v.emplace_back(s, s->submitted);
  for (auto& s : g.per_thread) v.emplace_back(s, s->submitted);
  return v;
}

// Waits for all work submitted so far on every stream.
void wait_all_locked(Lock& lk) {
  for (auto& [s, seq] : all_streams_locked()) wait_stream_locked(lk, s, seq);
}

bool in_range(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  return p >= it->first && n <= it->second && p - it->first <= it->second - n;
}

bool memop_target_ok_locked(uintptr_t p, size_t n) {
  return in_range(S().registered, p, n) || in_range(S().allocs, p, n);
}

// ---------------------------------------------------------------- execution

struct Fault {
  CUresult code = CUDA_SUCCESS;
  std::vector<std::string> lines;
};

std::string assert_line(const char* where, const char* kernel, long long thread, const char* expr) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s: %s: block: [0,0,0], thread: [%lld,0,0] Assertion `%s` failed.", where, kernel, thread,
           expr);
  return buf;
}

// Runs a kernel other than sleep_us (no lock held).
Fault run_kernel(const Item& it) {
  Fault f;
  switch (it.k->id) {
    case KernelId::NllLoss: {
      auto* out = reinterpret_cast<float*>(it.arg<CUdeviceptr>(0));
      auto* target = reinterpret_cast<const int64_t*>(it.arg<CUdeviceptr>(1));
      int32_t n = it.arg<int32_t>(2), n_classes = it.arg<int32_t>(3);
      int64_t ignore_index = it.arg<int64_t>(4);
      if (n > 0 && target == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      int64_t valid = 0;
      for (int32_t i = 0; i < n; ++i) {
        int64_t t = target[i];
        if (t == ignore_index) continue;
        if (t < 0 || t >= n_classes) {
          f.code = CUDA_ERROR_ASSERT;
          f.lines.push_back(
              assert_line("Loss.cu:250", "nll_loss_forward_reduce_cuda_kernel_2d", i, "t >= 0 && t < n_classes"));
          return f;
        }
        ++valid;
      }
      if (out == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      out[0] = static_cast<float>(valid);
      return f;
    }
    case KernelId::IndexSelect: {
      auto* out = reinterpret_cast<float*>(it.arg<CUdeviceptr>(0));
      auto* index = reinterpret_cast<const int64_t*>(it.arg<CUdeviceptr>(1));
      int32_t n = it.arg<int32_t>(2), src_size = it.arg<int32_t>(3);
      if (n > 0 && index == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      for (int32_t i = 0; i < n; ++i) {
        if (index[i] < 0 || index[i] >= src_size)
          f.lines.push_back(assert_line("Indexing.cu:1231", "indexSelectSmallIndex", i, "srcIndex < srcSelectDimSize"));
      }
      if (!f.lines.empty()) {
        f.code = CUDA_ERROR_ASSERT;
        return f;
      }
      if (n > 0 && out == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      for (int32_t i = 0; i < n; ++i) out[i] = static_cast<float>(index[i]);
      return f;
    }
    case KernelId::IllegalAddress: return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
    case KernelId::FillF32: {
      auto* p = reinterpret_cast<float*>(it.arg<CUdeviceptr>(0));
      int32_t n = it.arg<int32_t>(1);
      float v = it.arg<float>(2);
      if (n > 0 && p == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      for (int32_t i = 0; i < n; ++i) p[i] = v;
      return f;
    }
    case KernelId::SleepUs: break;  // handled by the worker
  }
  return f;
}

void fill_memory(void* dst, uint64_t value, size_t n, bool is32) {
  if (!is32) {
    memset(dst, static_cast<unsigned char>(value), n);
    return;
  }
  auto v = static_cast<uint32_t>(value);
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) memcpy(p + 4 * i, &v, 4);
}

// Copies, memsets and host functions (no lock held).
void run_plain(const Item& it) {
  switch (it.kind) {
    case Item::Copy: memcpy(it.dst, it.src, it.n); return;
    case Item::Memset8: fill_memory(it.dst, it.value, it.n, false); return;
    case Item::Memset32: fill_memory(it.dst, it.value, it.n, true); return;
    case Item::HostFn: it.fn(it.dst); return;
    default: return;
  }
}

// Runs one item; called with the lock held, may release it meanwhile.
void run_item_locked(Lock& lk, Item& it) {
  Sim& g = S();
  switch (it.kind) {
    case Item::WaitEvent:
      g.progress.wait(lk, [&] { return it.wait_stream->done >= it.wait_seq || g.dead || g.shutdown; });
      return;
    case Item::Write32:
    case Item::Write64: {
      size_t n = it.kind == Item::Write32 ? 4 : 8;
      if (!memop_target_ok_locked(it.addr, n)) {  // unregistered since
        set_fault_locked(CUDA_ERROR_ILLEGAL_ADDRESS, {});
        return;
      }
      if (n == 4)
        __atomic_store_n(reinterpret_cast<uint32_t*>(it.addr), static_cast<uint32_t>(it.value), __ATOMIC_RELEASE);
      else
        __atomic_store_n(reinterpret_cast<uint64_t*>(it.addr), it.value, __ATOMIC_RELEASE);
      return;
    }
    case Item::Copy:
    case Item::Memset8:
    case Item::Memset32:
    case Item::HostFn:
      lk.unlock();
      run_plain(it);
      lk.lock();
      return;
    case Item::Kernel: {
      if (it.k->id == KernelId::SleepUs) {
        int64_t us = it.arg<int64_t>(0);
        if (us > 0) {
          auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
          g.shutdown_cv.wait_until(lk, deadline, [&] { return g.shutdown; });
        }
        return;
      }
      lk.unlock();
      Fault f = run_kernel(it);
      lk.lock();
      if (f.code != CUDA_SUCCESS) set_fault_locked(f.code, std::move(f.lines));
      return;
    }
  }
}

void worker_main(StreamP sp) {
  Sim& g = S();
  Stream& s = *sp;
  Lock lk(g.mu);
  for (;;) {
    s.cv.wait(lk, [&] { return !s.q.empty() || s.stop; });
    if (s.q.empty()) break;      // stop requested and nothing left
    if (g.dead || g.shutdown) {  // dead context / exiting: discard
      s.done += s.q.size();
      s.q.clear();
      g.progress.notify_all();
      continue;
    }
    Item it = std::move(s.q.front());
    s.q.pop_front();
    run_item_locked(lk, it);
    ++s.done;
    g.progress.notify_all();
  }
}

// Stops and joins the worker of a stream nobody can reach any more.
void stop_worker(Lock& lk, Stream& s) {
  s.stop = true;
  s.cv.notify_all();
  std::thread t = std::move(s.worker);
  lk.unlock();
  if (t.joinable()) t.join();
  lk.lock();
}

// Library destructor: discard queued work, cut sleeps short, join workers.
// State stays usable for later callers.
__attribute__((destructor)) void sim_shutdown() {
  Sim& g = S();
  Lock lk(g.mu);
  if (g.shutdown) return;
  g.shutdown = true;
  g.shutdown_cv.notify_all();
  g.progress.notify_all();
  std::vector<StreamP> all;
  all.push_back(g.legacy);
  for (auto& [h, s] : g.streams) all.push_back(s);
  for (auto& s : g.per_thread) all.push_back(s);
  for (auto& s : all) stop_worker(lk, *s);
}

// fork(): the child has none of the parent's threads. Hold the lock across
// fork so the state is consistent, then give the child a working sim: every
// stream's earlier work counts as finished (it is the parent's), workers start
// afresh on demand, and the condition variables forget the parent's waiters.
void atfork_prepare() { S().mu.lock(); }

void atfork_parent() { S().mu.unlock(); }

void atfork_child() {
  Sim& g = S();
  new (&g.progress) std::condition_variable;
  new (&g.shutdown_cv) std::condition_variable;
  auto reset = [](Stream& s) {
    new (&s.worker) std::thread;  // the parent's worker does not exist here
    new (&s.cv) std::condition_variable;
    s.started = false;
    s.stop = false;
    s.q.clear();
    s.done = s.submitted;
  };
  reset(*g.legacy);
  for (auto& [h, s] : g.streams) reset(*s);
  for (auto& s : g.per_thread) reset(*s);
  g.mu.unlock();
}

// ---------------------------------------------------------------- launches

CUresult pack_args(const KernelDesc& k, void** params, void** extra, Item& it) {
  if (k.nparams == 0) return CUDA_SUCCESS;
  if (params != nullptr) {
    for (int i = 0; i < k.nparams; ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      memcpy(it.args + k.offsets[i], params[i], k.sizes[i]);
    }
    return CUDA_SUCCESS;
  }
  if (extra != nullptr) {
    void* buf = nullptr;
    size_t* size = nullptr;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
        buf = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = static_cast<size_t*>(extra[i + 1]);
      else
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (buf == nullptr || size == nullptr || *size < k.total) return CUDA_ERROR_INVALID_VALUE;
    memcpy(it.args, buf, k.total);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, CUstream h,
                void** params, void** extra, bool ptsz) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Sim& g = S();
  Lock lk(g.mu);
  auto* fn = reinterpret_cast<const Function*>(f);
  if (!g.functions.count(fn)) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bx > 1024 || by > 1024 || bz > 64 || uint64_t{bx} * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  Item it;
  it.kind = Item::Kernel;
  it.k = fn->k;
  if ((r = pack_args(*fn->k, params, extra, it)) != CUDA_SUCCESS) return r;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  return submit_locked(*s, std::move(it));
}

CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool ptsz) {
  if (c == nullptr) {
    CUresult r = enter_ctx();
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
  }
  return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream, params,
                extra, ptsz);
}

// ---------------------------------------------------------------- streams API

CUresult stream_sync(CUstream h, bool ptsz) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r;
  {
    Lock lk(g.mu);
    StreamP s;
    r = resolve_locked(h, ptsz, s);
    if (r == CUDA_SUCCESS && s->capturing) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS) wait_stream_locked(lk, s);
  }
  return finish(r);
}

CUresult stream_query(CUstream h, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  {
    Lock lk(g.mu);
    StreamP s;
    if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    r = s->done < s->submitted ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    if (!g.dead) return r;
  }
  return sticky_result();  // the fault happened while we looked
}

CUresult stream_get_id(CUstream h, unsigned long long* id, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  *id = s->id;
  return CUDA_SUCCESS;
}

CUresult stream_is_capturing(CUstream h, CUstreamCaptureStatus* st, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (st == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  *st = s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  if (s->kind == Stream::Legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = true;
  s->capture_mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->capture = std::make_unique<GraphData>();
  ++g.capturing;
  return CUDA_SUCCESS;
}

std::unique_ptr<GraphData> take_capture_locked(Stream& s) {
  s.capturing = false;
  --S().capturing;
  return std::move(s.capture);
}

CUresult end_capture(CUstream h, CUgraph* out, bool ptsz) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  std::unique_ptr<GraphData> dropped;
  {
    Lock lk(g.mu);
    StreamP s;
    r = resolve_locked(h, ptsz, s);
    if (r == CUDA_SUCCESS && out == nullptr) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !s->capturing) r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        s->capture_thread != std::this_thread::get_id())
      r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (r == CUDA_SUCCESS) {
      std::unique_ptr<GraphData> gd = take_capture_locked(*s);
      if (g.sticky.load(std::memory_order_acquire) != 0) {  // dead context: no graph
        *out = nullptr;
        dropped = std::move(gd);
      } else {
        auto key = reinterpret_cast<CUgraph>(gd.get());
        g.graphs.emplace(key, std::move(gd));
        *out = key;
      }
    }
  }
  dropped.reset();
  return finish(r);
}

CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  auto e = g.events.find(ev);
  if (e == g.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capturing) return CUDA_SUCCESS;  // accepted, ignored
  const Event& E = *e->second;
  if (!E.s || E.s == s) return CUDA_SUCCESS;  // nothing to wait for / stream order suffices
  if (E.s->done >= E.seq) return CUDA_SUCCESS;
  Item it;
  it.kind = Item::WaitEvent;
  it.wait_stream = E.s;
  it.wait_seq = E.seq;
  return enqueue_locked(*s, std::move(it));
}

CUresult event_record(CUevent ev, CUstream h, unsigned flags, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto e = g.events.find(ev);
  if (e == g.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  if (s->capturing) return CUDA_SUCCESS;  // accepted, ignored
  e->second->s = s;
  e->second->seq = s->submitted;
  return CUDA_SUCCESS;
}

CUresult memop(CUstream h, CUdeviceptr addr, uint64_t value, unsigned flags, bool is64, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) return CUDA_ERROR_INVALID_VALUE;
  size_t n = is64 ? 8 : 4;
  if (addr == 0 || addr % n != 0) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  if (!memop_target_ok_locked(addr, n)) return CUDA_ERROR_INVALID_VALUE;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  Item it;
  it.kind = is64 ? Item::Write64 : Item::Write32;
  it.addr = addr;
  it.value = value;
  return submit_locked(*s, std::move(it));
}

CUresult memcpy_sync(void* dst, const void* src, size_t n) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    if (g.capturing > 0)
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
      wait_all_locked(lk);
  }
  CUresult e = sticky_result();
  if (e != CUDA_SUCCESS) return e;
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, src, n);
  return CUDA_SUCCESS;
}

CUresult memcpy_async(void* dst, const void* src, size_t n, CUstream h, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Item it;
  it.kind = Item::Copy;
  it.dst = dst;
  it.src = src;
  it.n = n;
  return submit_locked(*s, std::move(it));
}

// Synchronous memset: waits for all streams, then fills.
CUresult memset_sync(CUdeviceptr dst, uint64_t value, size_t n, bool is32) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    if (g.capturing > 0)
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
      wait_all_locked(lk);
  }
  CUresult e = sticky_result();
  if (e != CUDA_SUCCESS) return e;
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == 0 || (is32 && dst % 4 != 0)) return CUDA_ERROR_INVALID_VALUE;
  fill_memory(reinterpret_cast<void*>(dst), value, n, is32);
  return CUDA_SUCCESS;
}

CUresult memset_async(CUdeviceptr dst, uint64_t value, size_t n, bool is32, CUstream h, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == 0 || (is32 && dst % 4 != 0)) return CUDA_ERROR_INVALID_VALUE;
  Item it;
  it.kind = is32 ? Item::Memset32 : Item::Memset8;
  it.dst = reinterpret_cast<void*>(dst);
  it.value = value;
  it.n = n;
  return submit_locked(*s, std::move(it));
}

CUresult launch_host_func(CUstream h, CUhostFn fn, void* data, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  Item it;
  it.kind = Item::HostFn;
  it.fn = fn;
  it.dst = data;
  return submit_locked(*s, std::move(it));
}

CUresult graph_launch(CUgraphExec x, CUstream h, bool ptsz) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  Lock lk(g.mu);
  auto e = g.execs.find(x);
  if (e == g.execs.end()) return CUDA_ERROR_INVALID_HANDLE;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  for (const Item& node : e->second->nodes) {
    Item copy = node;
    if ((r = submit_locked(*s, std::move(copy))) != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult graph_instantiate(CUgraphExec* out, CUgraph graph) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto it = g.graphs.find(graph);
  if (it == g.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto x = std::make_unique<GraphExec>();
  x->nodes = it->second->nodes;
  auto key = reinterpret_cast<CUgraphExec>(x.get());
  g.execs.emplace(key, std::move(x));
  *out = key;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- error table

struct ErrorInfo {
  CUresult code;
  const char* name;
  const char* text;
};

#define E(code, text) \
  { code, #code, text }
const ErrorInfo kErrors[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
      "operation would make the legacy stream depend on a capturing blocking stream"),
    E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
      "attempt to terminate a thread-local capture sequence from another thread"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

const ErrorInfo* find_error(CUresult code) {
  for (const ErrorInfo& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

// ---------------------------------------------------------------- attributes

int attribute_value(int a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
    default: return 0;  // every other valid attribute: 0
  }
}

}  // namespace

// ======================================================================
// Exported API
// ======================================================================

// ---- init, version, errors

SIM_API CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  S().initialized.store(true, std::memory_order_release);
  return sticky_result();
}

SIM_API CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = 13000;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorInfo* e = find_error(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorInfo* e = find_error(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- device

SIM_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int* count) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(len), "%s", "cdsa simulated GPU");
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib < CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  *pi = attribute_value(attrib);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = size_t{80} << 30;
  return CUDA_SUCCESS;
}

// ---- context

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  ++S().primary_refs;
  *pctx = &S().primary;
  return CUDA_SUCCESS;
}

namespace {
CUresult primary_release(CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  if (S().primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --S().primary_refs;
  return CUDA_SUCCESS;
}
}  // namespace

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  *flags = 0;
  *active = S().primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (ctx != nullptr && ctx != &S().primary) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = ctx;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_current;
  return CUDA_SUCCESS;
}

namespace {
constexpr int kCtxStackDepth = 16;
thread_local CUcontext t_ctx_stack[kCtxStackDepth];  // contexts below the current one
thread_local int t_ctx_depth = 0;

CUresult ctx_push(CUcontext ctx) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (ctx == nullptr || ctx != &S().primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_current != nullptr) {
    if (t_ctx_depth == kCtxStackDepth) return CUDA_ERROR_OUT_OF_MEMORY;
    t_ctx_stack[t_ctx_depth++] = t_current;
  }
  t_current = ctx;
  return CUDA_SUCCESS;
}

CUresult ctx_pop(CUcontext* pctx) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = t_current;
  t_current = t_ctx_depth > 0 ? t_ctx_stack[--t_ctx_depth] : nullptr;
  return CUDA_SUCCESS;
}
}  // namespace

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }
SIM_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return ctx_pop(pctx); }
SIM_API CUresult cuCtxPopCurrent(CUcontext* pctx) { return ctx_pop(pctx); }

SIM_API CUresult cuCtxGetDevice(CUdevice* device) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = t_current;
  if (ctx == nullptr || ctx != &S().primary) return CUDA_ERROR_INVALID_CONTEXT;
  *ctxId = 1;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize(void) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    if (g.capturing > 0)
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
      wait_all_locked(lk);
  }
  return finish(r);
}

// ---- streams

namespace {
CUresult stream_create(CUstream* ph, unsigned flags) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto s = std::make_shared<Stream>(Stream::Created, g.next_stream_id++);
  s->flags = flags;
  auto h = reinterpret_cast<CUstream>(s.get());
  g.streams.emplace(h, std::move(s));
  *ph = h;
  return CUDA_SUCCESS;
}

CUresult stream_destroy(CUstream h) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  {
    Lock lk(g.mu);
    auto it = g.streams.find(h);
    if (h == nullptr || it == g.streams.end()) {
      lk.unlock();
      return finish(CUDA_ERROR_INVALID_HANDLE);
    }
    StreamP s = it->second;
    g.streams.erase(it);
    if (s->capturing) take_capture_locked(*s);
    wait_stream_locked(lk, s);
    stop_worker(lk, *s);
  }
  return finish(CUDA_SUCCESS);
}
}  // namespace

SIM_API CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) { return stream_create(phStream, Flags); }

SIM_API CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return stream_create(phStream, flags);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
SIM_API CUresult cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }

SIM_API CUresult cuStreamSynchronize(CUstream hStream) { return stream_sync(hStream, false); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_sync(hStream, true); }

SIM_API CUresult cuStreamQuery(CUstream hStream) { return stream_query(hStream, false); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, true); }

SIM_API CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  return stream_get_id(hStream, streamId, false);
}
SIM_API CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long* streamId) {
  return stream_get_id(hStream, streamId, true);
}

SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return stream_is_capturing(hStream, captureStatus, false);
}
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return stream_is_capturing(hStream, captureStatus, true);
}

SIM_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode, false);
}
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode, true);
}
SIM_API CUresult cuStreamBeginCapture(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) { return end_capture(hStream, phGraph, false); }
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end_capture(hStream, phGraph, true);
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, false);
}
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, true);
}

// ---- stream memory operations

SIM_API CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, false, false);
}
SIM_API CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, false, true);
}
SIM_API CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, false, false);
}
SIM_API CUresult cuStreamWriteValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, false, true);
}
SIM_API CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, true, false);
}
SIM_API CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, true, true);
}
SIM_API CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, true, false);
}
SIM_API CUresult cuStreamWriteValue64_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return memop(stream, addr, value, flags, true, true);
}

// ---- events

SIM_API CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & ~0xFu) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto e = std::make_unique<Event>();
  e->flags = Flags;
  auto h = reinterpret_cast<CUevent>(e.get());
  g.events.emplace(h, std::move(e));
  *phEvent = h;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, false); }
SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, true); }
SIM_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags, false);
}
SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags, true);
}

SIM_API CUresult cuEventQuery(CUevent hEvent) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  {
    Lock lk(g.mu);
    auto e = g.events.find(hEvent);
    if (e == g.events.end()) return CUDA_ERROR_INVALID_HANDLE;
    const Event& E = *e->second;
    r = (E.s && E.s->done < E.seq) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    if (!g.dead) return r;
  }
  return sticky_result();  // the fault happened while we looked
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    auto e = g.events.find(hEvent);
    if (e == g.events.end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else if (e->second->s) {
      StreamP s = e->second->s;
      uint64_t seq = e->second->seq;
      wait_stream_locked(lk, s, seq);
    }
  }
  return finish(r);
}

namespace {
CUresult event_destroy(CUevent h) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::unique_ptr<Event> victim;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(S().mu);
    auto e = S().events.find(h);
    if (e == S().events.end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else {
      victim = std::move(e->second);
      S().events.erase(e);
    }
  }
  victim.reset();
  return finish(r);
}
}  // namespace

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent) { return event_destroy(hEvent); }
SIM_API CUresult cuEventDestroy(CUevent hEvent) { return event_destroy(hEvent); }

// ---- memory

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = (bytesize + 255) & ~size_t{255};
  if (rounded < bytesize) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = nullptr;
  if (posix_memalign(&p, 256, rounded) != 0 || p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(p, 0, rounded);
  {
    Lock lk(S().mu);
    S().allocs[reinterpret_cast<uintptr_t>(p)] = bytesize;
  }
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0) return finish(CUDA_SUCCESS);
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  bool found = false;
  {
    Lock lk(g.mu);
    if (g.allocs.count(dptr)) {
      found = true;
      wait_all_locked(lk);  // queued work may still use it
      g.allocs.erase(dptr);
    } else {
      r = CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (found) free(reinterpret_cast<void*>(dptr));
  return finish(r);
}

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
}
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
}
SIM_API CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
}
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
}

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                           CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return memcpy_async(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return memcpy_async(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount, hStream, true);
}

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
}
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
}
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
}
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
}
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount, hStream,
                      false);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount, hStream,
                      true);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return memset_sync(dstDevice, uc, N, false);
}
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return memset_sync(dstDevice, uc, N, false);
}
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_sync(dstDevice, ui, N, true);
}
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_sync(dstDevice, ui, N, true);
}
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return memset_async(dstDevice, uc, N, false, hStream, false);
}
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return memset_async(dstDevice, uc, N, false, hStream, true);
}
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_async(dstDevice, ui, N, true, hStream, false);
}
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_async(dstDevice, ui, N, true, hStream, true);
}

SIM_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t kTotal = size_t{80} << 30;
  size_t used = 0;
  Lock lk(S().mu);
  for (auto& [p, n] : S().allocs) used += n;
  *total = kTotal;
  *free = used < kTotal ? kTotal - used : 0;
  return CUDA_SUCCESS;
}

namespace {
CUresult host_register(void* p, size_t bytesize, unsigned flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~0xFu) return CUDA_ERROR_INVALID_VALUE;
  auto b = reinterpret_cast<uintptr_t>(p);
  if (b + bytesize < b) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto next = g.registered.lower_bound(b);
  if (next != g.registered.end() && next->first < b + bytesize) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (next != g.registered.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > b) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  g.registered.emplace(b, bytesize);
  return CUDA_SUCCESS;
}
}  // namespace

SIM_API CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}
SIM_API CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostUnregister(void* p) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    auto b = reinterpret_cast<uintptr_t>(p);
    if (p == nullptr || !g.registered.count(b)) {
      r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
      wait_all_locked(lk);  // queued memops may still target it
      g.registered.erase(b);
    }
  }
  return finish(r);
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto b = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr || !in_range(S().registered, b, 1)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = static_cast<CUdeviceptr>(b);
  return CUDA_SUCCESS;
}

// ---- modules and functions

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto m = std::make_unique<Module>();
  auto h = reinterpret_cast<CUmodule>(m.get());
  g.modules.emplace(h, std::move(m));
  *module = h;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  std::unique_ptr<Module> victim;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    auto it = g.modules.find(hmod);
    if (it == g.modules.end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else {
      victim = std::move(it->second);
      g.modules.erase(it);
      for (auto& [name, f] : victim->functions) g.functions.erase(f.get());
    }
  }
  victim.reset();  // queued items refer to the static KernelDesc only
  return finish(r);
}

SIM_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto it = g.modules.find(hmod);
  if (it == g.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  Module& m = *it->second;
  auto f = m.functions.find(name);
  if (f == m.functions.end()) {
    const KernelDesc* k = nullptr;
    for (const KernelDesc& d : kKernels)
      if (strcmp(d.name, name) == 0) k = &d;
    if (k == nullptr) {  // e.g. a mangled name: longest kernel name it contains
      for (const KernelDesc& d : kKernels)
        if (strstr(name, d.name) != nullptr && (k == nullptr || strlen(d.name) > strlen(k->name))) k = &d;
    }
    if (k == nullptr) return CUDA_ERROR_NOT_FOUND;
    auto fn = std::make_unique<Function>(Function{k, name});
    g.functions.insert(fn.get());
    f = m.functions.emplace(name, std::move(fn)).first;
  }
  *hfunc = reinterpret_cast<CUfunction>(f->second.get());
  return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto* fn = reinterpret_cast<const Function*>(hfunc);
  if (hfunc == nullptr || !S().functions.count(fn)) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}

// ---- launches

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra, false);
}
SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra, true);
}
SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}
SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}
SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void** kernelParams) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, nullptr,
                false);
}
SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                void** kernelParams) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, nullptr, true);
}

SIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, false);
}
SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, true);
}

// ---- graphs

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  return graph_instantiate(phGraphExec, hGraph);
}

namespace {
CUresult graph_instantiate_legacy(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                  size_t bufferSize) {
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return graph_instantiate(phGraphExec, hGraph);
}
}  // namespace

SIM_API CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                    size_t bufferSize) {
  return graph_instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                       char* logBuffer, size_t bufferSize) {
  return graph_instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch(hGraphExec, hStream, false);
}
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch(hGraphExec, hStream, true);
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::unique_ptr<GraphExec> victim;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(S().mu);
    auto it = S().execs.find(hGraphExec);
    if (it == S().execs.end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else {
      victim = std::move(it->second);
      S().execs.erase(it);
    }
  }
  victim.reset();
  return finish(r);
}

SIM_API CUresult cuGraphDestroy(CUgraph hGraph) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::unique_ptr<GraphData> victim;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(S().mu);
    auto it = S().graphs.find(hGraph);
    if (it == S().graphs.end()) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else {
      victim = std::move(it->second);
      S().graphs.erase(it);
    }
  }
  victim.reset();
  return finish(r);
}

// ---- cuGetProcAddress

namespace {

struct ProcEntry {
  const char* base;  // name as cudart asks for it
  const char* impl;  // newest exported implementation
  void* fn;
  const char* pt_impl;  // per-thread-default-stream variant, or null
  void* pt_fn;
};

#define P1(base, impl) \
  { #base, #impl, reinterpret_cast < void*>(&impl), nullptr, nullptr }
#define P2(base, impl, pt) \
  { #base, #impl, reinterpret_cast < void*>(&impl), #pt, reinterpret_cast < void*>(&pt) }

const ProcEntry kProcs[] = {
    P1(cuInit, cuInit),
    P1(cuDriverGetVersion, cuDriverGetVersion),
    P1(cuGetErrorName, cuGetErrorName),
    P1(cuGetErrorString, cuGetErrorString),
    P2(cuGetProcAddress, cuGetProcAddress_v2, cuGetProcAddress_v2_ptsz),
    P1(cuDeviceGet, cuDeviceGet),
    P1(cuDeviceGetCount, cuDeviceGetCount),
    P1(cuDeviceGetName, cuDeviceGetName),
    P1(cuDeviceGetAttribute, cuDeviceGetAttribute),
    P1(cuDeviceTotalMem, cuDeviceTotalMem_v2),
    P1(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain),
    P1(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2),
    P1(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState),
    P1(cuCtxSetCurrent, cuCtxSetCurrent),
    P1(cuCtxGetCurrent, cuCtxGetCurrent),
    P1(cuCtxPushCurrent, cuCtxPushCurrent_v2),
    P1(cuCtxPopCurrent, cuCtxPopCurrent_v2),
    P1(cuCtxGetDevice, cuCtxGetDevice),
    P1(cuCtxGetId, cuCtxGetId),
    P1(cuCtxSynchronize, cuCtxSynchronize),
    P1(cuStreamCreate, cuStreamCreate),
    P1(cuStreamCreateWithPriority, cuStreamCreateWithPriority),
    P1(cuStreamDestroy, cuStreamDestroy_v2),
    P2(cuStreamSynchronize, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    P2(cuStreamQuery, cuStreamQuery, cuStreamQuery_ptsz),
    P2(cuStreamGetId, cuStreamGetId, cuStreamGetId_ptsz),
    P2(cuStreamIsCapturing, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    P2(cuStreamBeginCapture, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    P2(cuStreamEndCapture, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    P2(cuStreamWaitEvent, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    P2(cuStreamWriteValue32, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz),
    P2(cuStreamWriteValue64, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz),
    P1(cuEventCreate, cuEventCreate),
    P2(cuEventRecord, cuEventRecord, cuEventRecord_ptsz),
    P2(cuEventRecordWithFlags, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    P1(cuEventQuery, cuEventQuery),
    P1(cuEventSynchronize, cuEventSynchronize),
    P1(cuEventDestroy, cuEventDestroy_v2),
    P1(cuMemAlloc, cuMemAlloc_v2),
    P1(cuMemFree, cuMemFree_v2),
    P2(cuMemcpyHtoD, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    P2(cuMemcpyDtoH, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    P2(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    P2(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    P2(cuMemcpy, cuMemcpy, cuMemcpy_ptds),
    P2(cuMemcpyAsync, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    P2(cuMemcpyDtoD, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    P2(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    P2(cuMemsetD8, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    P2(cuMemsetD32, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    P2(cuMemsetD8Async, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    P2(cuMemsetD32Async, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    P1(cuMemGetInfo, cuMemGetInfo_v2),
    P1(cuMemHostRegister, cuMemHostRegister_v2),
    P1(cuMemHostUnregister, cuMemHostUnregister),
    P1(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2),
    P1(cuModuleLoadData, cuModuleLoadData),
    P1(cuModuleUnload, cuModuleUnload),
    P1(cuModuleGetFunction, cuModuleGetFunction),
    P1(cuFuncGetName, cuFuncGetName),
    P2(cuLaunchKernel, cuLaunchKernel, cuLaunchKernel_ptsz),
    P2(cuLaunchKernelEx, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    P2(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    P2(cuLaunchHostFunc, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    P1(cuGraphInstantiate, cuGraphInstantiateWithFlags),
    P1(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags),
    P2(cuGraphLaunch, cuGraphLaunch, cuGraphLaunch_ptsz),
    P1(cuGraphExecDestroy, cuGraphExecDestroy),
    P1(cuGraphDestroy, cuGraphDestroy),
};

// Exported names that are not the newest implementation of any base name;
// found by exact name only.
const ProcEntry kExtraExports[] = {
    P1(cuGetProcAddress, cuGetProcAddress),
    P1(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease),
    P1(cuStreamDestroy, cuStreamDestroy),
    P1(cuStreamBeginCapture, cuStreamBeginCapture),
    P1(cuStreamBeginCapture_ptsz, cuStreamBeginCapture_ptsz),
    P1(cuStreamWriteValue32, cuStreamWriteValue32),
    P1(cuStreamWriteValue32_ptsz, cuStreamWriteValue32_ptsz),
    P1(cuStreamWriteValue64, cuStreamWriteValue64),
    P1(cuStreamWriteValue64_ptsz, cuStreamWriteValue64_ptsz),
    P1(cuEventDestroy, cuEventDestroy),
    P1(cuCtxPushCurrent, cuCtxPushCurrent),
    P1(cuCtxPopCurrent, cuCtxPopCurrent),
    P1(cuMemHostRegister, cuMemHostRegister),
    P1(cuGraphInstantiate, cuGraphInstantiate),
    P1(cuGraphInstantiate_v2, cuGraphInstantiate_v2),
};

#undef P1
#undef P2

void* lookup_proc(const char* sym, int version, cuuint64_t flags) {
  const bool pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  // ABI changes: callers built against older headers get the old signature.
  if (strcmp(sym, "cuGraphInstantiate") == 0 && version < 12000) return reinterpret_cast<void*>(&cuGraphInstantiate_v2);
  if (strcmp(sym, "cuGetProcAddress") == 0 && version < 12000) return reinterpret_cast<void*>(&cuGetProcAddress);
  if (strcmp(sym, "cuStreamBeginCapture") == 0 && version < 10010)
    return pt ? reinterpret_cast<void*>(&cuStreamBeginCapture_ptsz) : reinterpret_cast<void*>(&cuStreamBeginCapture);
  for (const ProcEntry& e : kProcs)
    if (strcmp(sym, e.base) == 0) return (pt && e.pt_fn) ? e.pt_fn : e.fn;
  for (const ProcEntry& e : kProcs) {
    if (strcmp(sym, e.impl) == 0) return e.fn;
    if (e.pt_impl && strcmp(sym, e.pt_impl) == 0) return e.pt_fn;
  }
  for (const ProcEntry& e : kExtraExports)
    if (strcmp(sym, e.impl) == 0) return e.fn;
  return nullptr;
}

CUresult get_proc_address(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* fn = lookup_proc(symbol, cudaVersion, flags);
  *pfn = fn;
  if (status != nullptr) *status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

SIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* symbolStatus) {
  if ((flags & (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) == 0)
    flags |= CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}
