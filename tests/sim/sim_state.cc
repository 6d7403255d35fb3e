// cdsa simulated CUDA driver (tests only): state, per-context sticky errors and the fault text, the error table,
// cuInit, exit and fork.
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

Sim::Sim() {
  for (Device& d : devices) {
    auto c = std::make_unique<CUctx_st>();
    c->device = static_cast<int>(&d - devices);
    c->primary = true;
    d.primary = c.get();
    contexts.emplace(c.get(), std::move(c));
  }
}

thread_local CUcontext t_current = nullptr;

// ---------------------------------------------------------------- errors

namespace {
// Held while a context's assert text is printed: a call that observes a fault meanwhile (on any thread, for any
// context) waits until the text is out. Recursive: a stdio hook that calls back into the sim while the text is
// printed finds it printed.
std::recursive_mutex g_print_mu;
}  // namespace

// c's sticky error, if any; the first caller that gets it, on any thread, prints the context's assert text as the
// real driver does: formatted on the host with stdio (fprintf on stderr, one call per line), never write(2), so a
// preloaded write() hook does not see it. Once per context (per incarnation). Never call with S().mu held.
CUresult observe(CUctx_st* c) {
  if (c == nullptr) return CUDA_SUCCESS;
  int e = c->sticky.load(std::memory_order_acquire);
  if (e == 0) return CUDA_SUCCESS;
  std::lock_guard<std::recursive_mutex> print(g_print_mu);
  std::vector<std::string> lines;
  {
    Lock lk(S().mu);
    if (!c->text_out && c->sticky.load(std::memory_order_acquire) == e) {
      c->text_out = true;
      lines = c->fault_lines;
    }
  }
  if (!lines.empty()) {
    for (const std::string& line : lines) fprintf(stderr, "%s\n", line.c_str());
    fflush(stderr);
  }
  return static_cast<CUresult>(e);
}

// Common prologue: initialised, then the current context's sticky error.
CUresult enter() {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return observe(t_current);
}

CUresult current_ctx_check(CUctx_st* c) {
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // cuda.h, 709: "the context current to the calling thread has been destroyed using ::cuCtxDestroy, or is a primary
  // context which has not yet been initialized."
  if (c->state != CUctx_st::State::Active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return CUDA_SUCCESS;
}

// Prologue for calls that need a current context.
CUresult enter_ctx() {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  return current_ctx_check(t_current);
}

// For cleanup calls: the object was released; report the sticky error over the result.
CUresult finish_in(CUctx_st* c, CUresult r) {
  CUresult e = observe(c);
  return e != CUDA_SUCCESS ? e : r;
}
CUresult finish(CUresult r) { return finish_in(t_current, r); }

const char* intern_locked(const std::string& name) { return S().names.insert(name).first->c_str(); }

void wake_streams_of_locked(const CUctx_st* c) {
  Sim& g = S();
  if (c->legacy) c->legacy->cv.notify_all();
  for (auto& [h, s] : g.streams)
    if (s->ctx.ctx == c) s->cv.notify_all();
  for (auto& s : g.per_thread)
    if (s->ctx.ctx == c) s->cv.notify_all();
}

void set_fault_locked(Stream& s, Fault f, const Item& it) {
  log_fault(s.ctx.id, s.id, it, f.code);
  CUctx_st* c = s.ctx.ctx;
  if (s.gone || !s.ctx.live() || c->sticky.load(std::memory_order_relaxed) != 0) return;
  c->fault_lines = std::move(f.lines);
  c->text_out = false;
  c->sticky.store(f.code, std::memory_order_release);
  wake_streams_of_locked(c);  // their queued work is discarded now
  S().progress.notify_all();
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

namespace {
std::vector<StreamP> every_stream_locked() {
  Sim& g = S();
  std::vector<StreamP> all;
  for (auto& [h, c] : g.contexts)
    if (c->legacy) all.push_back(c->legacy);
  for (auto& [h, s] : g.streams) all.push_back(s);
  for (auto& s : g.per_thread) all.push_back(s);
  return all;
}
}  // namespace

// Library destructor: discard queued work, cut sleeps short, join workers.
// State stays usable for later callers.
__attribute__((destructor)) void sim_shutdown() {
  Sim& g = S();
  Lock lk(g.mu);
  if (g.shutdown) return;
  g.shutdown = true;
  g.progress.notify_all();
  std::vector<StreamP> all = every_stream_locked();
  for (auto& s : all) s->cv.notify_all();  // every worker cuts its running work short at once
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
  for (auto& s : every_stream_locked()) {
    new (&s->worker) std::thread;  // the parent's worker does not exist here
    new (&s->cv) std::condition_variable;
    s->started = false;
    s->stop = false;
    s->q.clear();
    s->running.clear();
    s->finished_early.clear();
    s->skip_now.clear();
    s->done = s->submitted;
  }
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
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
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
  arm_teardown_at_exit();
  return observe(t_current);
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
