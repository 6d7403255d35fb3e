/* A GPU-sharing hook built the way HAMi-core's libvgpu.so is (issue 17), to run beside libcdsa.so in either
 * order. Preloaded, it
 *   - finds "the real dlsym" with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
 *   - interposes dlsym: cu* names it hooks come back as its own hooks, whatever the handle; RTLD_NEXT is looked up
 *     with the real dlsym (so relative to this library, as HAMi-core does); everything else goes to the real dlsym;
 *   - exports the launch calls it enforces (cuLaunchKernel, cuLaunchKernelEx) and cuGetProcAddress_v2, which hands
 *     out its hooks for those names without asking the driver and forwards every other request;
 *   - reaches the driver through a table filled on first use with the real dlsym on dlopen("libcuda.so.1").
 * It counts every launch it sees and prints "gpu-share-hook: N launches" on stderr at exit. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef void* (*dlsym_fn)(void*, const char*);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*proc_fn)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

static dlsym_fn real_dlsym;
static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static struct {
  launch_fn launch;
  launch_ex_fn launch_ex;
  proc_fn proc;
} table;
static unsigned long launches;

static void init_dlsym(void) {
  real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (!real_dlsym) {
    static const char msg[] = "gpu-share-hook: no real dlsym\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(99);
  }
}

static void init_table(void) {
  pthread_once(&dlsym_once, init_dlsym);
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE);
  if (!h) return;
  table.launch = (launch_fn)real_dlsym(h, "cuLaunchKernel");
  table.launch_ex = (launch_ex_fn)real_dlsym(h, "cuLaunchKernelEx");
  table.proc = (proc_fn)real_dlsym(h, "cuGetProcAddress_v2");
}

__attribute__((visibility("default"))) CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                               unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                               CUstream s, void** params, void** extra) {
  pthread_once(&table_once, init_table);
  __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);  /* where HAMi-core checks the core quota */
  if (!table.launch) return CUDA_ERROR_NOT_INITIALIZED;
  return table.launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

__attribute__((visibility("default"))) CUresult cuLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f,
                                                                 void** params, void** extra) {
  pthread_once(&table_once, init_table);
  __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
  if (!table.launch_ex) return CUDA_ERROR_NOT_INITIALIZED;
  return table.launch_ex(cfg, f, params, extra);
}

static void* own_hook(const char* name) {
  if (!strcmp(name, "cuLaunchKernel")) return (void*)cuLaunchKernel;
  if (!strcmp(name, "cuLaunchKernelEx")) return (void*)cuLaunchKernelEx;
  if (!strcmp(name, "cuGetProcAddress_v2")) return (void*)cuGetProcAddress_v2;
  return NULL;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                    cuuint64_t flags,
                                                                    CUdriverProcAddressQueryResult* status) {
  pthread_once(&table_once, init_table);
  void* own = symbol ? own_hook(symbol) : NULL;
  if (own && pfn) {
    *pfn = own;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (!table.proc) return CUDA_ERROR_NOT_INITIALIZED;
  return table.proc(symbol, pfn, version, flags, status);
}

__attribute__((visibility("default"))) void* dlsym(void* handle, const char* symbol) {
  pthread_once(&dlsym_once, init_dlsym);
  if (handle == RTLD_NEXT) return real_dlsym(RTLD_NEXT, symbol);
  if (symbol[0] == 'c' && symbol[1] == 'u') {
    void* own = own_hook(symbol);
    if (own) return own;
  }
  return real_dlsym(handle, symbol);
}

__attribute__((destructor)) static void report(void) {
  char buf[64];
  int n = snprintf(buf, sizeof buf, "gpu-share-hook: %lu launches\n", __atomic_load_n(&launches, __ATOMIC_RELAXED));
  (void)!write(2, buf, (size_t)n);
}
