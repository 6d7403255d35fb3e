/* The oracle runners' one piece of native help (tests/oracle/README.md): the gate, a host function that holds its
 * stream until the program opens it (or ORACLE_GATE_TIMEOUT_MS, default 3000, passed: a shrunk program may have lost
 * its open). Native so that it never needs the GIL: under ctypes.PyDLL the thread that would open it may be inside a
 * driver call that holds the GIL. runner.cc links it; runner.py loads liboracle_support.so. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define ORACLE_GATES 256

static atomic_int g_open[ORACLE_GATES];

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A CUhostFn: `id` is the gate number. */
void oracle_gate_wait(void* id) {
  int i = (int)(intptr_t)id;
  if (i < 0 || i >= ORACLE_GATES) return;
  const char* t = getenv("ORACLE_GATE_TIMEOUT_MS");
  long long limit = t && *t ? atoll(t) : 3000;
  long long deadline = now_ms() + limit;
  struct timespec nap = {0, 100 * 1000};
  while (!atomic_load(&g_open[i]) && now_ms() < deadline) nanosleep(&nap, NULL);
}

void oracle_gate_open(int i) {
  if (i >= 0 && i < ORACLE_GATES) atomic_store(&g_open[i], 1);
}

/* Host memory the programs' memops and async copies target: static, so that work still queued when the runner's
 * objects are gone (a program that exits without a sync; Python's finalization) never writes freed memory. 4096
 * bytes for memops (registered), 4096 for copies. */
void* oracle_host_memory(void) {
  static _Alignas(4096) unsigned char memory[8192];
  return memory;
}

void oracle_gate_open_all(void) {
  for (int i = 0; i < ORACLE_GATES; ++i) atomic_store(&g_open[i], 1);
}
