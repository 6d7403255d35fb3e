/* A library dlopen'ed RTLD_LOCAL together with its own cudart and libcuda (its
 * DT_NEEDED), which resolves them with dlsym(RTLD_DEFAULT, ...): glibc then
 * searches the global scope and then this library's own group. Prints what it
 * finds; the program's output must be the same with and without cdsa, except
 * that a driver entry point comes back as cdsa's wrapper. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int cudaRuntimeGetVersion(int* v);

static const char* library_of(void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "none";
  const char* slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

void scope_probe(void) {
  int v = 0;
  cuDriverGetVersion(&v);  // a direct reference: libcuda.so.1 is this library's DT_NEEDED, in its group
  void* rt = dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion");
  printf("cudaRuntimeGetVersion: %s, %s\n", rt ? "found" : "null",
         rt == (void*)&cudaRuntimeGetVersion ? "the group's own" : "another");
  void* init = dlsym(RTLD_DEFAULT, "cuInit");
  printf("cuInit: %s", init ? "found" : "null");
  if (init) printf(", call returns %d", (int)((CUresult(*)(unsigned))init)(0));
  printf("\n");
  fprintf(stderr, "cuInit from %s\n", library_of(init));
  void* version = dlsym(RTLD_DEFAULT, "cuDriverGetVersion");  // exempt: the driver's own
  printf("cuDriverGetVersion: %s\n", version ? "found" : "null");
  fprintf(stderr, "cuDriverGetVersion from %s\n", library_of(version));
  printf("cuNoSuchEntryPoint: %s\n", dlsym(RTLD_DEFAULT, "cuNoSuchEntryPoint") ? "found" : "null");
}
