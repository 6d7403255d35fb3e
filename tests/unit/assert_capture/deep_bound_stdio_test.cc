// bind_driver_stdio (shim/intercept/driver_stdio.cc): a library dlopen'ed with RTLD_DEEPBIND binds its fprintf to libc,
// past the capture hooks; after bind_driver_stdio its GOT entry holds what the global scope resolves (the hooks,
// which this test program defines and exports, as libcdsa.so does for a program), in a read-only RELRO GOT
// (-z now), in a lazily bound one, and never for a library bound the plain way.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <string>

#include "shim/intercept/libc_hooks.h"
#include "shim/record/assert_capture.h"

namespace cdsa {
namespace {

using PrintFn = void (*)(const char*);

// Under a sanitizer the printer depends on the sanitizer runtime, whose fprintf interceptor the deep binding then
// finds first (another interposer's, left alone) and which forwards past this program's hooks: nothing to test.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_SANITIZER() GTEST_SKIP() << "a sanitizer runtime interposes between the printer and libc"
#else
#define SKIP_UNDER_SANITIZER() (void)0
#endif

PrintFn load(const char* file, int mode) {
  void* h = dlopen((std::string(CDSA_TEST_LIB_DIR) + "/" + file).c_str(), mode);
  EXPECT_NE(h, nullptr) << dlerror();
  return h ? reinterpret_cast<PrintFn>(dlsym(h, "deep_printer_line")) : nullptr;
}

// What `print(text)` wrote to fd 2 inside a driver call, as the capture saw it; fd 2 itself goes to /dev/null.
std::string captured_while(PrintFn print, const char* text) {
  fflush(stderr);
  int saved = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  std::string got;
  {
    DriverCallScope call;
    print(text);
    got = captured_driver_stderr();
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(null);
  return got;
}

TEST(DeepBoundStdio, ARelroGotBoundToLibcIsBoundToTheHooks) {
  SKIP_UNDER_SANITIZER();
  PrintFn print = load("libdeep_printer_now.so", RTLD_NOW | RTLD_DEEPBIND);
  ASSERT_NE(print, nullptr);
  EXPECT_EQ(captured_while(print, "one"), "");  // deep-bound: libc's fprintf, the hooks never see it
  EXPECT_GE(bind_driver_stdio(reinterpret_cast<const void*>(print)), 1);
  EXPECT_EQ(captured_while(print, "two"), "printer: two\n");
  EXPECT_EQ(bind_driver_stdio(reinterpret_cast<const void*>(print)), 0);  // already the hooks'
}

TEST(DeepBoundStdio, ALazyGotNotBoundYetIsBoundToTheHooks) {
  SKIP_UNDER_SANITIZER();
  PrintFn print = load("libdeep_printer_lazy.so", RTLD_LAZY | RTLD_DEEPBIND);
  ASSERT_NE(print, nullptr);
  EXPECT_GE(bind_driver_stdio(reinterpret_cast<const void*>(print)), 1);
  EXPECT_EQ(captured_while(print, "three"), "printer: three\n");
}

TEST(DeepBoundStdio, APlainlyBoundLibraryIsLeftAlone) {
  PrintFn print = load("libdeep_printer_plain.so", RTLD_NOW);
  ASSERT_NE(print, nullptr);
  EXPECT_EQ(captured_while(print, "four"), "printer: four\n");  // bound to the hooks by the loader
  EXPECT_EQ(bind_driver_stdio(reinterpret_cast<const void*>(print)), 0);
}

}  // namespace
}  // namespace cdsa
