// cdsa simulated CUDA driver (tests only): state, sticky errors, the error table, cuInit, exit and fork.
// See README.md for the contract and sim_internal.h for the shared state.

#include "sim_internal.h"

namespace sim {

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

// ---------------------------------------------------------------- errors

// The sticky error, if any; the first caller that gets it, on any thread,
// prints the device's assert text as the real driver does: formatted on the
// host with stdio (fprintf on stderr, one call per line), never write(2), so a
// preloaded write() hook does not see it. Never call with S().mu held.
CUresult sticky_result() {
  Sim& g = S();
  if (g.torn_down.load(std::memory_order_acquire)) return CUDA_ERROR_DEINITIALIZED;
  int e = g.sticky.load(std::memory_order_acquire);
  if (e == 0) return CUDA_SUCCESS;
  std::call_once(g.report_once, [&g] {
    for (const std::string& line : g.fault_lines) fprintf(stderr, "%s\n", line.c_str());
    fflush(stderr);
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

}  // namespace sim

using namespace sim;

// ---- init, version, errors

SIM_API CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  S().initialized.store(true, std::memory_order_release);
  return sticky_result();
}

SIM_API CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = driver_version();
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
