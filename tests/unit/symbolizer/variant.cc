// Two builds of this file (CDSA_VARIANT 1 and 2) with different forced
// build-ids and different code layout: used to test build-id mismatch
// detection.
#include "test_backtrace.h"

#include <cstdint>

#if CDSA_VARIANT == 2
// Shifts the function below to another address, so that a wrongly trusted
// variant-2 file would name a different function / line.
extern "C" __attribute__((visibility("default"), noinline)) int cdsa_symtest_variant_padding(int x) {
  volatile int a[32];
  for (int i = 0; i < 32; ++i) a[i] = x * i;
  int s = 0;
  for (int i = 0; i < 32; ++i) s += a[i] * a[(i * 7) % 32];
  return s;
}
#endif

extern "C" __attribute__((visibility("default"), noinline)) int cdsa_symtest_variant_capture(
    uintptr_t* out, int max) {
  return cdsa_test_backtrace(out, max);
}
