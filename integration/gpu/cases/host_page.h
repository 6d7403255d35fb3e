// Shared by driver_facts.cu and native_faults.cu: one page of host memory registered for the device, the target of
// cuStreamWriteValue32/64 as cdsa's breadcrumbs use them.
#pragma once
#include <cuda.h>
#include <sys/mman.h>
#include <cstring>

// Maps a zeroed page, registers it (portable, device-mapped) and gives its device address in *dev; returns the
// first failing call's result.
static CUresult registered_host_page(void** page, CUdeviceptr* dev) {
  *page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(*page, 0, 4096);
  CUresult r = cuMemHostRegister(*page, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r == CUDA_SUCCESS) r = cuMemHostGetDevicePointer(dev, *page, 0);
  return r;
}
