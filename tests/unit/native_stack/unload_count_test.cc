// The native stack cache (shim/stacks/native_stack.h) against dlclose: cdsa's own dlclose (linked into this test, as
// it is into libcdsa.so) drops the cached stacks only when glibc says something was unloaded. Most dlcloses
// unload nothing (a library still referenced, cdsa's dlopen(RTLD_NOLOAD) + dlclose in its dlsym hook): those
// keep the cache.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "shim/stacks/native_stack.h"

namespace cdsa {
namespace {

volatile int g_sink = 0;

// One capture point, reached from one call site: the same stack each time.
__attribute__((noinline)) bool captured_from_cache() {
  uintptr_t out[64];
  NativeCapture how;
  int n = capture_native_stack(out, 64, &how);
  g_sink = g_sink + 1;  // no tail call
  return n > 0 && how.hit;
}

void dlclose_unloading_nothing() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr) << dlerror();
  ASSERT_EQ(dlclose(libc), 0);
}

void dlclose_unloading_a_library() {
  void* h = dlopen(NS_HELPER, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  ASSERT_EQ(dlclose(h), 0);
}

TEST(UnloadCount, OnlyADlcloseThatUnloadsDropsTheCachedStacks) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan builds unwind with glibc's backtrace(), without the cache (see native_stack.cc)";
#endif
  ASSERT_TRUE(native_stack_init());
  ASSERT_TRUE(native_unloads_tracked());  // this test's dlclose is cdsa's
  native_cache_clear();
  std::vector<bool> hit;
  for (int step = 0; step < 5; ++step) {
    if (step == 2) dlclose_unloading_nothing();
    if (step == 3) dlclose_unloading_a_library();
    hit.push_back(captured_from_cache());
  }
  EXPECT_EQ(hit, (std::vector<bool>{false, true, true, false, true}));
}

}  // namespace
}  // namespace cdsa
