#include "shim/common/driver.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <atomic>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "shim/common/log.h"

namespace cdsa {
namespace {

Driver g_driver;
std::once_flag g_once;
std::atomic<bool> g_ready{false};

void init_driver(const void* hint) {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h && hint) {
    Dl_info info;
    if (dladdr(hint, &info) && info.dli_fname) h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }
  if (!h) {
    log_line("could not find the CUDA driver library in this process: launches are not recorded");
    return;
  }
  DlsymFn sym = real_dlsym();
  auto get = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(sym(h, name));
  };
  get(g_driver.StreamGetId, "cuStreamGetId");
  get(g_driver.CtxGetCurrent, "cuCtxGetCurrent");
  get(g_driver.CtxSetCurrent, "cuCtxSetCurrent");
  get(g_driver.CtxGetId, "cuCtxGetId");
  get(g_driver.FuncGetName, "cuFuncGetName");
  get(g_driver.KernelGetName, "cuKernelGetName");
  get(g_driver.StreamIsCapturing, "cuStreamIsCapturing");
  get(g_driver.GraphNodeGetType, "cuGraphNodeGetType");
  get(g_driver.GraphKernelNodeGetParams, "cuGraphKernelNodeGetParams_v2");
  get(g_driver.GraphNodeFindInClone, "cuGraphNodeFindInClone");
  get(g_driver.GraphGetNodes, "cuGraphGetNodes");
  get(g_driver.GraphNodeGetParams, "cuGraphNodeGetParams");
  get(g_driver.StreamWriteValue64, "cuStreamWriteValue64_v2");
  get(g_driver.StreamWriteValue32, "cuStreamWriteValue32_v2");
  get(g_driver.DeviceGetAttribute, "cuDeviceGetAttribute");
  get(g_driver.MemHostRegister, "cuMemHostRegister_v2");
  get(g_driver.MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
  get(g_driver.StreamQuery, "cuStreamQuery");
  get(g_driver.GetErrorName, "cuGetErrorName");
  get(g_driver.GetErrorString, "cuGetErrorString");
  get(g_driver.DriverGetVersion, "cuDriverGetVersion");
  get(g_driver.CtxGetDevice, "cuCtxGetDevice");
  get(g_driver.StreamGetCtx, "cuStreamGetCtx");
  get(g_driver.CtxGetDeviceOf, "cuCtxGetDevice_v2");
  get(g_driver.DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState");
  get(g_driver.DeviceGetCount, "cuDeviceGetCount");
  get(g_driver.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  get(g_driver.DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  get(g_driver.DeviceGetName, "cuDeviceGetName");
  get(g_driver.DeviceGetPCIBusId, "cuDeviceGetPCIBusId");
  get(g_driver.ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  get(g_driver.EventCreate, "cuEventCreate");
  get(g_driver.EventRecord, "cuEventRecord");
  get(g_driver.StreamWaitEvent, "cuStreamWaitEvent");
  get(g_driver.EventDestroy, "cuEventDestroy_v2");
  g_ready.store(true, std::memory_order_release);
}

}  // namespace

const Driver& driver() noexcept { return g_driver; }
bool driver_ready() noexcept { return g_ready.load(std::memory_order_acquire); }
void driver_init(const void* hint) noexcept {
  std::call_once(g_once, [hint] { init_driver(hint); });
}

}  // namespace cdsa
