/* GPU suite case 29a (issue 27, info): the ceiling's premise on a real driver. For every (name, version, flags) of
 * the list (one "name version flags" a line: the table's typedefs, written by the suite from the headers it found),
 * the driver's function at that version, at 13000 and at the driver's own version, through cuGetProcAddress_v2.
 * cdsa wraps a request above its headers' version only when the driver's answer there is the same function as at
 * the headers' version: same pointer <=> same prototype (shim/intercept/interpose.cc, wrap_proc_address). Also what
 * the driver answers for an unknown name and for a version older than a name's first (CUDA_SUCCESS with NULL, as
 * cuda.h says, or CUDA_ERROR_NOT_FOUND: tests/sim/README.md's SIM_CUDA_PROC_MISSING). No cuInit, nothing run.
 *   nvcc -x c entry_point_pointers.c -o entry_point_pointers -L$CUDA_HOME/lib64/stubs -lcuda
 *   entry_point_pointers LIST
 * stdout: "driver V", "missing unknown|too-old rc R status S pfn NULL|set", then per entry
 * "ep NAME VERSION FLAGS OWN AT13000 ATDRIVER", each a pointer (0x...), NULL, or rc=N. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*GetProc)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

static void answer(GetProc gpa, const char* name, int version, unsigned long long flags, char* out, size_t n) {
  void* p = NULL;
  CUdriverProcAddressQueryResult st;
  CUresult r = gpa(name, &p, version, flags, &st);
  if (r != CUDA_SUCCESS)
    snprintf(out, n, "rc=%d", (int)r);
  else if (!p)
    snprintf(out, n, "NULL");
  else
    snprintf(out, n, "%p", p);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIST\n", argv[0]);
    return 2;
  }
  int driver = 0;
  cuDriverGetVersion(&driver);
  printf("driver %d\n", driver);
  GetProc gpa = (GetProc)cuGetProcAddress_v2;
  const char* probes[2][2] = {{"unknown", "cuNoSuchEntryPoint"}, {"too-old", "cuKernelGetName"}};
  for (int i = 0; i < 2; ++i) {
    void* p = (void*)&driver;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult r = gpa(probes[i][1], &p, i ? 12000 : 13000, 0, &st);
    printf("missing %s rc %d status %d pfn %s\n", probes[i][0], (int)r, (int)st, p ? "set" : "NULL");
  }
  FILE* f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  char name[128];
  int version;
  unsigned long long flags;
  while (fscanf(f, "%127s %d %llu", name, &version, &flags) == 3) {
    char own[32], at13[32], atdrv[32];
    answer(gpa, name, version, flags, own, sizeof own);
    answer(gpa, name, 13000, flags, at13, sizeof at13);
    answer(gpa, name, driver, flags, atdrv, sizeof atdrv);
    printf("ep %s %d %llu %s %s %s\n", name, version, flags, own, at13, atdrv);
  }
  fclose(f);
  return 0;
}
