// cdsa simulated CUDA driver (tests only): devices, attributes, primary and created contexts.
// See README.md for the contract and sim_internal.h for the shared state.

#include "sim_internal.h"

namespace sim {

// ---------------------------------------------------------------- attributes

int attribute_value(int a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      return 1;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      return 512;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      return 1;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      return 2;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
      return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
      return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      return 232448;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
      return no_64bit_memops() ? 0 : 1;
    default:
      return 0;  // every other valid attribute: 0
  }
}

bool no_64bit_memops() {
  static const bool off = [] {
    const char* v = getenv("SIM_CUDA_NO_64BIT_MEMOPS");
    return v != nullptr && strcmp(v, "1") == 0;
  }();
  return off;
}

// A context handle the sim made (alive or not); unknown pointers are never dereferenced.
CUctx_st* known_context(CUcontext ctx) {
  if (ctx == nullptr) return nullptr;
  Lock lk(S().mu);
  auto it = S().contexts.find(ctx);
  return it == S().contexts.end() ? nullptr : it->second.get();
}

// The context a _v2 context call names: ctx, or the current one when null. Unknown or destroyed:
// CUDA_ERROR_INVALID_CONTEXT; a primary context not active: CUDA_ERROR_CONTEXT_IS_DESTROYED.
CUresult context_arg(CUcontext& ctx) {
  if (ctx == nullptr) ctx = t_current;
  CUctx_st* c = known_context(ctx);
  if (c == nullptr || c->state == CUctx_st::State::Destroyed) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->state != CUctx_st::State::Active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return CUDA_SUCCESS;
}

// A device ordinal in [0, SIM_CUDA_DEVICES).
CUresult device_arg(CUdevice dev) {
  return dev >= 0 && dev < device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// Device 0 keeps the name and bus id it always had; the others: "cdsa simulated GPU <n>", and the buses of an
// eight-GPU HGX board.
const char* const kBusIds[kMaxDevices] = {"0000:3B:00.0", "0000:4C:00.0", "0000:5D:00.0", "0000:6E:00.0",
                                          "0000:9B:00.0", "0000:AC:00.0", "0000:BD:00.0", "0000:CE:00.0"};

void teardown_ctx_locked(Lock& lk, CUctx_st* c, CUctx_st::State to) {
  Sim& g = S();
  if (c->state == CUctx_st::State::Active) {
    // Its queued work is waited for (a dead context's was discarded), then its streams go.
    auto streams = streams_of_locked(c);
    for (auto& [s, seq] : streams) wait_stream_locked(lk, s, seq);
    for (auto& [s, seq] : streams) {
      s->gone = true;
      s->abort = true;
      if (s->capturing) end_capture_locked(*s);
      g.progress.notify_all();
      stop_worker(lk, *s);
    }
    c->legacy.reset();
    free_ctx_functions_locked(c);
    c->fault_lines.clear();
    c->text_out = false;
    c->sticky.store(0, std::memory_order_release);  // the fault goes with the context, unreported if never seen
  }
  c->state = to;
}

namespace {
// A primary context becomes active (its first retain, or the first after a reset): a new incarnation, a new id.
void activate_locked(CUctx_st* c) {
  if (c->state == CUctx_st::State::Active) return;
  c->state = CUctx_st::State::Active;
  c->id = S().next_ctx_id++;
}
}  // namespace

}  // namespace sim

using namespace sim;

// ---- devices (SIM_CUDA_DEVICES of them, alike but for name and bus id). Device queries answer the current
// context's state.

SIM_API CUresult cuDeviceGet(CUdevice* device, int ordinal) { return answer(device, ordinal, device_arg(ordinal)); }

SIM_API CUresult cuDeviceGetCount(int* count) { return answer(count, device_count()); }

SIM_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  if (dev == 0)
    snprintf(name, static_cast<size_t>(len), "%s", "cdsa simulated GPU");
  else
    snprintf(name, static_cast<size_t>(len), "cdsa simulated GPU %d", dev);
  return CUDA_SUCCESS;
}

// The real driver's form, "domain:bus:device.function" in hex, 12 characters ("at least 13 characters including
// the NUL" says cuda.h); device 0 sits at bus 0x3b.
SIM_API CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(pciBusId, static_cast<size_t>(len), "%s", kBusIds[dev]);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  bool known = attrib >= CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK && attrib < CU_DEVICE_ATTRIBUTE_MAX;
  return answer(pi, attribute_value(attrib),
                device_arg(dev) != CUDA_SUCCESS ? CUDA_ERROR_INVALID_DEVICE
                : known                         ? CUDA_SUCCESS
                                                : CUDA_ERROR_INVALID_VALUE);
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  return answer(bytes, size_t{80} << 30, device_arg(dev));
}

// ---- primary contexts, one per device

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  Device& d = S().devices[dev];
  ++d.refs;
  activate_locked(d.primary);
  *pctx = d.primary;
  return CUDA_SUCCESS;
}

namespace {
// "The context is automatically reset once the last reference to it is released" (cuda.h).
CUresult primary_release(CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  Device& d = S().devices[dev];
  if (d.refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--d.refs == 0) teardown_ctx_locked(lk, d.primary, CUctx_st::State::Inactive);
  return CUDA_SUCCESS;
}

// "Destroy all allocations and reset all state on the primary context ... Resetting the primary context does not
// release it" (cuda.h): its streams, modules, functions and fault go; it is inactive (709 where it is current) until
// retained again, then a new incarnation with a new id. Succeeds after a fault, which it does not report and whose
// text it does not print.
CUresult primary_reset(CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  teardown_ctx_locked(lk, S().devices[dev].primary, CUctx_st::State::Inactive);
  return CUDA_SUCCESS;
}

CUresult primary_set_flags(CUdevice dev, unsigned flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  if (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  S().devices[dev].flags = flags;
  return CUDA_SUCCESS;
}
}  // namespace

void sim::arm_teardown_at_exit() {
  static std::once_flag once;
  const char* v = getenv("SIM_CUDA_TEARDOWN_AT_EXIT");
  if (v == nullptr || strcmp(v, "1") != 0) return;
  std::call_once(once, [] {
    atexit([] {
      for (int d = 0; d < device_count(); ++d) primary_reset(d);
    });
  });
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }
SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return primary_set_flags(dev, flags); }

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  Lock lk(S().mu);
  const Device& d = S().devices[dev];
  *flags = d.flags;
  *active = d.primary->state == CUctx_st::State::Active ? 1 : 0;
  return CUDA_SUCCESS;
}

// ---- the calling thread's current context and its stack. cuCtxSetCurrent and cuCtxPushCurrent answer the state of
// the context they name (NULL: none), cuCtxPopCurrent the popped one's; cuCtxGetCurrent answers the current one's
// sticky error (SIM_CUDA_CTX_CURRENT_AFTER_FAULT=fail, the default) or never (=ok).

namespace {
// cuCtxSetCurrent and cuCtxPushCurrent take a context the sim made that is not destroyed ("a context that has had
// cuCtxDestroy() invoked on it" is CUDA_ERROR_INVALID_CONTEXT, cuda.h); an inactive primary one is taken (calls then
// answer CUDA_ERROR_CONTEXT_IS_DESTROYED).
CUresult settable(CUcontext ctx) {
  CUctx_st* c = known_context(ctx);
  if (c == nullptr || c->state == CUctx_st::State::Destroyed) return CUDA_ERROR_INVALID_CONTEXT;
  return observe(c);
}

constexpr int kCtxStackDepth = 16;
thread_local CUcontext t_ctx_stack[kCtxStackDepth];  // contexts below the current one
thread_local int t_ctx_depth = 0;

CUresult ctx_push(CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (CUresult r = settable(ctx); r != CUDA_SUCCESS) return r;
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

CUresult get_current_gate() {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return ctx_current_ok_after_fault() ? CUDA_SUCCESS : observe(t_current);
}
}  // namespace

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != nullptr)
    if (CUresult r = settable(ctx); r != CUDA_SUCCESS) return r;
  t_current = ctx;
  return CUDA_SUCCESS;
}

// "If no context is bound to the calling CPU thread then *pctx is set to NULL and CUDA_SUCCESS is returned"
// (cuda.h). A destroyed or inactive context still current is returned as it is.
SIM_API CUresult cuCtxGetCurrent(CUcontext* pctx) { return answer(pctx, t_current, CUDA_SUCCESS, get_current_gate); }

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }
SIM_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) { return ctx_pop(pctx); }
SIM_API CUresult cuCtxPopCurrent(CUcontext* pctx) { return ctx_pop(pctx); }

// cuCtxGetDevice answers the sticky error in either mode (it is among the calls that surface one in PyTorch).
SIM_API CUresult cuCtxGetDevice(CUdevice* device) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  return answer(device, t_current->device);
}

// The calls naming a context answer that context's state.
SIM_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult valid = context_arg(ctx);
  if (valid != CUDA_SUCCESS) return valid;
  if (CUresult e = observe(ctx); e != CUDA_SUCCESS) return e;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult valid = context_arg(ctx);
  if (valid != CUDA_SUCCESS) return valid;
  if (CUresult e = observe(ctx); e != CUDA_SUCCESS) return e;
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctxId = ctx->id;
  return CUDA_SUCCESS;
}

// cuCtxCreate (CUDA 13: cuCtxCreate_v4; the 3-argument cuCtxCreate_v2 too): a new context on `dev`, made current
// on this thread (pushed, as the real call does). Params and flags ignored.
namespace {
CUresult ctx_create(CUcontext* pctx, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_arg(dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext c;
  {
    Lock lk(S().mu);
    auto ctx = std::make_unique<CUctx_st>();
    ctx->device = dev;
    ctx->state = CUctx_st::State::Active;
    ctx->id = S().next_ctx_id++;
    c = ctx.get();
    S().contexts.emplace(c, std::move(ctx));
  }
  // Pushed as ctx_push does, whatever the calling thread's context state.
  if (t_current != nullptr) {
    if (t_ctx_depth == kCtxStackDepth) return CUDA_ERROR_OUT_OF_MEMORY;
    t_ctx_stack[t_ctx_depth++] = t_current;
  }
  t_current = c;
  *pctx = c;
  return CUDA_SUCCESS;
}

// "Destroys and cleans up all resources associated with the context ... If ctx is current to the calling thread
// then ctx will also be popped ... If ctx is current to other threads, then ctx will remain current to those
// threads, and attempting to access ctx from those threads will result in the error CUDA_ERROR_CONTEXT_IS_DESTROYED"
// (cuda.h). Its queued work is waited for first. Succeeds after a fault in it (the fault goes with it).
CUresult ctx_destroy(CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st* c = known_context(ctx);
  if (c == nullptr || c->primary || c->state == CUctx_st::State::Destroyed)
    return finish(CUDA_ERROR_INVALID_CONTEXT);  // the primary context is not destroyed this way
  {
    Lock lk(S().mu);
    teardown_ctx_locked(lk, c, CUctx_st::State::Destroyed);
  }
  if (t_current == ctx) t_current = t_ctx_depth > 0 ? t_ctx_stack[--t_ctx_depth] : nullptr;
  return finish(CUDA_SUCCESS);
}
}  // namespace

SIM_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int, CUdevice dev) {
  return ctx_create(pctx, dev);
}
SIM_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int, CUdevice dev) { return ctx_create(pctx, dev); }
SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }

// "Blocks until the current context has completed all preceding requested tasks" (cuda.h).
SIM_API CUresult cuCtxSynchronize(void) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = current_ctx_check(t_current);
  if (r != CUDA_SUCCESS) return finish(r);
  return synchronize_ctx(t_current);
}

// CUDA 13: cudaDeviceSynchronize is this one (cuGetProcAddress "cuCtxSynchronize" at >= 13000).
SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult valid = context_arg(ctx);
  if (valid != CUDA_SUCCESS) return finish(valid);
  return synchronize_ctx(ctx);
}
