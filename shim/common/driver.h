// The driver functions cdsa calls for itself, resolved straight from libcuda
// (never through cdsa's own wrappers, so they cannot recurse or report twice).
//
// Contract: `driver_init(hint)` runs once, on the first wrapped CUDA call, with
// a real driver function pointer as a hint to find the driver's module when it
// is not loaded as "libcuda.so.1". Thread-safe; afterwards the table is
// read-only. A missing function stays null and its feature degrades.
#pragma once

#include <cuda.h>

namespace cdsa {

struct Driver {
  CUresult (*StreamGetId)(CUstream, unsigned long long*) = nullptr;
  CUresult (*CtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*CtxGetId)(CUcontext, unsigned long long*) = nullptr;
  CUresult (*FuncGetName)(const char**, CUfunction) = nullptr;
  CUresult (*KernelGetName)(const char**, CUkernel) = nullptr;  // 12.3+
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*StreamWriteValue64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*StreamWriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*MemHostRegister)(void*, size_t, unsigned int) = nullptr;
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned int) = nullptr;
  CUresult (*StreamQuery)(CUstream) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*CtxGetDevice)(CUdevice*) = nullptr;
  // Which context a stream belongs to, and that context's device, as the driver says (never the current context's
  // guess: a program may launch on another context's stream). cuCtxGetDevice_v2 is CUDA 13's (null before).
  CUresult (*StreamGetCtx)(CUstream, CUcontext*) = nullptr;
  CUresult (*CtxGetDeviceOf)(CUdevice*, CUcontext) = nullptr;  // cuCtxGetDevice_v2
  // Whether a device's primary context is still active after a release (its functions' handles are freed with it).
  CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned int*, int*) = nullptr;
  // The exit probe's handle of an active primary context (shim/fault/exit_probe.cc context_views).
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRelease)(CUdevice) = nullptr;  // cuDevicePrimaryCtxRelease_v2
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*) = nullptr;
  // The proof a PDL group's mark needs (shim/record/breadcrumbs.h): an event recorded after the group, waited on.
  CUresult (*EventCreate)(CUevent*, unsigned int) = nullptr;
  CUresult (*EventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int) = nullptr;
  CUresult (*EventDestroy)(CUevent) = nullptr;  // cuEventDestroy_v2
  // Graph bookkeeping (shim/record/graph_capture.h): the driver's view of a node cdsa holds no handle for.
  CUresult (*GraphNodeGetType)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*GraphKernelNodeGetParams)(CUgraphNode,
                                       CUDA_KERNEL_NODE_PARAMS_v2*) = nullptr;  // cuGraphKernelNodeGetParams_v2
  CUresult (*GraphNodeFindInClone)(CUgraphNode*, CUgraphNode, CUgraph) = nullptr;
  CUresult (*GraphGetNodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  // CUDA 13.2+ drivers only (absent from older ones' exports: never called there): a clone's conditional bodies.
  CUresult (*GraphNodeGetParams)(CUgraphNode, CUgraphNodeParams*) = nullptr;
};

const Driver& driver() noexcept;
void driver_init(const void* hint) noexcept;
bool driver_ready() noexcept;

// The real dlsym/dlvsym of the C library (found by reading its ELF symbol
// table, so cdsa's own dlsym hook is never in the way).
using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);
DlsymFn real_dlsym() noexcept;
DlvsymFn real_dlvsym() noexcept;
// The next dlsym/dlvsym in the chain: what dlsym(RTLD_NEXT, "dlsym") gives libcdsa.so (another interposer's
// hook loaded after cdsa, else libc's). The lookups cdsa does not answer with its own wrapper go there, never
// straight to libc's, so a hook loaded after cdsa keeps seeing them. Resolved in the constructor.
DlsymFn next_dlsym() noexcept;
DlvsymFn next_dlvsym() noexcept;
// Any libc function by name, found the same way: shim/common/libc_symbols.h.

// The stream a call means: the NULL stream of a per-thread-default-stream entry point (_ptsz/_ptds, or the
// per-thread flag of cuGetProcAddress) is this thread's per-thread stream.
inline CUstream effective_stream(CUstream s, bool per_thread) noexcept {
  return (s == nullptr && per_thread) ? CU_STREAM_PER_THREAD : s;
}

// The handles that name no stream of their own but one of the calling thread's current context: NULL, the legacy
// stream and the per-thread stream (cuda.h, "Stream synchronization behavior").
inline bool context_relative_stream(CUstream s) noexcept {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

// True for the sticky faults cuda.h documents as "the process must be terminated and relaunched": the kernel
// faults (700, 702, 710, 714-719, 721), 226 CUDA_ERROR_CONTAINED (error containment: NVLink peer faults, some
// hardware errors) and 911 CUDA_ERROR_EXTERNAL_DEVICE. Not 810 CUDA_ERROR_MPS_CLIENT_TERMINATED: the MPS server
// ended this client, usually for another client's fault (docs/attribution.md).
constexpr bool is_sticky_fault(CUresult r) noexcept {
  return r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_TIMEOUT || r == CUDA_ERROR_ASSERT ||
         (r >= CUDA_ERROR_HARDWARE_STACK_ERROR && r <= CUDA_ERROR_LAUNCH_FAILED) ||
         r == CUDA_ERROR_TENSOR_MEMORY_LEAK || r == CUDA_ERROR_CONTAINED || r == CUDA_ERROR_EXTERNAL_DEVICE;
}

// True for what the driver answers once the context is torn down (cudart's exit handlers ran first): 4
// CUDA_ERROR_DEINITIALIZED, 201 CUDA_ERROR_INVALID_CONTEXT, 709 CUDA_ERROR_CONTEXT_IS_DESTROYED. None is sticky.
constexpr bool is_torn_down(CUresult r) noexcept {
  return r == CUDA_ERROR_DEINITIALIZED || r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

}  // namespace cdsa
