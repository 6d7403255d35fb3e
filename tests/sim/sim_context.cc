// cdsa simulated CUDA driver (tests only): Device, attributes and contexts.
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

// The primary context, or a live one of cuCtxCreate's.
bool valid_context(CUcontext ctx) {
  if (ctx == &S().primary) return true;
  if (ctx == nullptr) return false;
  Lock lk(S().mu);
  return S().contexts.count(ctx) != 0;
}

// The context a _v2 context call names: ctx, or the current one when null.
CUresult context_arg(CUcontext& ctx) {
  if (ctx == nullptr) ctx = t_current;
  return valid_context(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult ctx_synchronize() { return synchronize_all(); }

CUresult device_arg(CUdevice dev) { return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }

}  // namespace sim

using namespace sim;

// ---- device

SIM_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  return answer(device, 0, ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE);
}

SIM_API CUresult cuDeviceGetCount(int* count) { return answer(count, 1); }

SIM_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(len), "%s", "cdsa simulated GPU");
  return CUDA_SUCCESS;
}

// The real driver's form, "domain:bus:device.function" in hex, 12 characters ("at least 13 characters including
// the NUL" says cuda.h); the simulated device sits at bus 0x3b.
SIM_API CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(pciBusId, static_cast<size_t>(len), "%s", "0000:3B:00.0");
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  bool known = attrib >= CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK && attrib < CU_DEVICE_ATTRIBUTE_MAX;
  return answer(pi, attribute_value(attrib),
                dev != 0 ? CUDA_ERROR_INVALID_DEVICE
                : known  ? CUDA_SUCCESS
                         : CUDA_ERROR_INVALID_VALUE);
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  return answer(bytes, size_t{80} << 30, device_arg(dev));
}

// ---- context

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUresult r = answer(pctx, &S().primary, device_arg(dev));
  if (r == CUDA_SUCCESS) {
    Lock lk(S().mu);
    ++S().primary_refs;
  }
  return r;
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

// Stands in for the driver's teardown at exit (what cudart's own exit handlers leave behind): from here on every
// call answers CUDA_ERROR_DEINITIALIZED, also after a fault, and prints nothing. Succeeds even after a fault.
static CUresult primary_reset(CUdevice dev) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  S().torn_down.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

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
  if (ctx != nullptr && !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = ctx;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext* pctx) { return answer(pctx, t_current); }

namespace {
constexpr int kCtxStackDepth = 16;
thread_local CUcontext t_ctx_stack[kCtxStackDepth];  // contexts below the current one
thread_local int t_ctx_depth = 0;

CUresult ctx_push(CUcontext ctx) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (!valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
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

SIM_API CUresult cuCtxGetDevice(CUdevice* device) { return answer(device, 0, CUDA_SUCCESS, enter_ctx); }

SIM_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) { return answer(device, 0, context_arg(ctx)); }

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  CUresult valid = context_arg(ctx);
  return answer(ctxId, valid == CUDA_SUCCESS ? static_cast<unsigned long long>(ctx->id) : 0, valid);
}

// cuCtxCreate (CUDA 13: cuCtxCreate_v4; the 3-argument cuCtxCreate_v2 too): a new context on device 0, made
// current on this thread (pushed, as the real call does). Its work shares the one device's streams and sticky state.
namespace {
CUresult ctx_create(CUcontext* pctx, CUdevice dev) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext c;
  {
    Lock lk(S().mu);
    auto ctx = std::make_unique<CUctx_st>(CUctx_st{S().next_ctx_id++});
    c = ctx.get();
    S().contexts.emplace(c, std::move(ctx));
  }
  if ((r = ctx_push(c)) != CUDA_SUCCESS) return r;
  *pctx = c;
  return CUDA_SUCCESS;
}

CUresult ctx_destroy(CUcontext ctx) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::unique_ptr<CUctx_st> victim;
  {
    Lock lk(S().mu);
    auto it = S().contexts.find(ctx);
    if (it == S().contexts.end()) {
      lk.unlock();
      return finish(CUDA_ERROR_INVALID_CONTEXT);  // the primary context is not destroyed this way
    }
    victim = std::move(it->second);
    S().contexts.erase(it);
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

SIM_API CUresult cuCtxSynchronize(void) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  return ctx_synchronize();
}

// CUDA 13: cudaDeviceSynchronize is this one (cuGetProcAddress "cuCtxSynchronize" at >= 13000).
SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (context_arg(ctx) != CUDA_SUCCESS) return finish(CUDA_ERROR_INVALID_CONTEXT);
  return ctx_synchronize();
}
