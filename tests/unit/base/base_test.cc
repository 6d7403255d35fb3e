// base/: the path helpers, the EINTR-safe I/O loops, the function identifier rule, the generated version.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "base/device_assert.h"
#include "base/identifier.h"
#include "base/io.h"
#include "base/path.h"
#include "base/version.h"

namespace cdsa::base {
namespace {

// The one parser of the device's assert line (base/device_assert.h), on lines as the driver prints them.
TEST(DeviceAssert, ParsesEveryFieldOfTheDriversLine) {
  const std::string nll =
      "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,1,2], thread: "
      "[3,4,5] Assertion `t >= 0 && t < n_classes` failed.";
  DeviceAssert a;
  ASSERT_TRUE(parse_device_assert(nll, &a));
  EXPECT_EQ(a.file, "../aten/src/ATen/native/cuda/Loss.cu");
  EXPECT_EQ(a.line, 250);
  EXPECT_EQ(a.function, "nll_loss_forward_reduce_cuda_kernel_2d");
  EXPECT_EQ(a.condition, "t >= 0 && t < n_classes");
  ASSERT_TRUE(a.has_position);
  EXPECT_EQ(a.block[0] * 100 + a.block[1] * 10 + a.block[2], 12u);
  EXPECT_EQ(a.thread[0] * 100 + a.thread[1] * 10 + a.thread[2], 345u);
  EXPECT_EQ(a.message, nll);
  EXPECT_TRUE(holds_device_assert(nll));

  DeviceAssert lambda;  // a lambda kernel, a condition with quotes
  ASSERT_TRUE(parse_device_assert("x.cu:92: operator(): block: [25778,0,0], thread: [37,0,0] Assertion "
                                  "`index < sizes[i] && \"index out of bounds\"` failed.",
                                  &lambda));
  EXPECT_EQ(lambda.function, "operator()");
  EXPECT_EQ(lambda.block[0], 25778u);
  EXPECT_EQ(lambda.condition, "index < sizes[i] && \"index out of bounds\"");

  DeviceAssert bad;  // a position that does not parse: the rest still does
  ASSERT_TRUE(parse_device_assert("k.cu:1: k: block: [x], thread: [0,0,0] Assertion `c` failed.", &bad));
  EXPECT_FALSE(bad.has_position);
  EXPECT_EQ(bad.function, "k");
  EXPECT_EQ(bad.condition, "c");
}

TEST(DeviceAssert, OtherLinesAreNone) {
  DeviceAssert a;
  EXPECT_FALSE(parse_device_assert("loss call returned", &a));
  EXPECT_FALSE(parse_device_assert("Assertion `t >= 0` failed.", &a));  // no position marker: a host assert
  EXPECT_FALSE(parse_device_assert("x.cu:1: k: block: [0,0,0], thread: [0,0,0]", &a));  // no "Assertion"
  EXPECT_EQ(a.message, "");
  EXPECT_FALSE(holds_device_assert("x.cu:1: k: block [0,0,0]"));
}

TEST(DeviceAssert, EveryLineOfATextButCdsasOwnQuotes) {
  const std::string device = "Loss.cu:250: nll: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0` failed.";
  auto asserts = parse_device_asserts(device + "\ncdsa: the device reported: " + device + "\nnoise\n" +
                                      "Other.cu:1: k: block: [0,0,0], thread: [1,0,0] Assertion `x` failed.");
  ASSERT_EQ(asserts.size(), 2u);
  EXPECT_EQ(asserts[0].file, "Loss.cu");
  EXPECT_EQ(asserts[0].line, 250);
  EXPECT_EQ(asserts[0].function, "nll");
  EXPECT_EQ(asserts[0].message, device);
  EXPECT_EQ(asserts[1].function, "k");  // the last line needs no newline
}

TEST(Path, BasenameAndDirname) {
  struct Case {
    const char* path;
    const char* base;
    const char* dir;
  };
  for (const Case& c : {Case{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.1", "/usr/lib/x86_64-linux-gnu"},
                        Case{"libcuda.so.1", "libcuda.so.1", "."}, Case{"/x", "x", "/"}, Case{"a/b", "b", "a"},
                        Case{"dir/", "", "dir"}, Case{"", "", "."}}) {
    EXPECT_EQ(basename_of(c.path), c.base) << c.path;
    EXPECT_EQ(dirname_of(c.path), c.dir) << c.path;
  }
}

TEST(Version, ComesFromTheProject) {
  // The top-level CMakeLists.txt's project(VERSION): three numbers.
  const std::string v = CDSA_VERSION;
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_NE(v, "0.0.0");
}

struct TempFile {
  std::string path;
  int fd = -1;
  TempFile() {
    char name[] = "/tmp/cdsa_base_test_XXXXXX";
    fd = mkstemp(name);
    path = name;
  }
  ~TempFile() {
    close(fd);
    unlink(path.c_str());
  }
};

TEST(Io, WriteAllThenReadFullAndPread) {
  TempFile f;
  ASSERT_GE(f.fd, 0);
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(write_all(f.fd, data.data(), data.size()));
  ASSERT_EQ(lseek(f.fd, 0, SEEK_SET), 0);
  std::string back(data.size() + 10, 'x');  // asks for more than there is: stops at the end
  EXPECT_EQ(read_full(f.fd, back.data(), back.size()), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(back.substr(0, data.size()), data);
  char mid[4];
  EXPECT_EQ(read_full(f.fd, mid, sizeof mid, 1000), 4);  // pread: at an offset, the file position unchanged
  EXPECT_EQ(memcmp(mid, data.data() + 1000, 4), 0);
}

TEST(Io, ErrorsSayWhy) {
  char c = 0;
  errno = 0;
  EXPECT_FALSE(write_all(-1, "x", 1));
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(read_full(-1, &c, 1), -1);
  EXPECT_EQ(errno, EBADF);
}

void on_alarm(int) {}

// A pipe read and a pipe write interrupted by a signal (no SA_RESTART) go on where they stopped.
TEST(Io, GoesOnAfterEintr) {
  struct sigaction sa {};
  sa.sa_handler = on_alarm;  // no SA_RESTART: read/write return EINTR
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pthread_t reader = pthread_self();
  std::string got(100000, '\0');  // more than a pipe holds: the writer blocks too
  std::string sent(got.size(), 'a');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 26);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the reader is blocked in read() by now
    pthread_kill(reader, SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(write_all(fds[1], sent.data(), sent.size()));
    close(fds[1]);
  });
  EXPECT_EQ(read_full(fds[0], got.data(), got.size()), static_cast<ssize_t>(got.size()));
  writer.join();
  EXPECT_EQ(got, sent);
  close(fds[0]);
  sigaction(SIGUSR1, &old, nullptr);
}

TEST(Identifier, TheBareNameOfAFunctionAsTheDeviceOrADemanglerPrintsIt) {
  struct Case {
    const char* function;
    const char* identifier;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"nll_loss_forward_reduce_cuda_kernel_2d", "nll_loss_forward_reduce_cuda_kernel_2d"},
           {"void at::native::(anonymous namespace)::index_kernel<float, 4>(float*, long)", "index_kernel"},
           {"void foo(T*) [with T = float]", "foo"},
           {"void bar<(int)4>(int*)", "bar"},
           {"ns::baz<Op<int>>", "baz"},
           {"", ""},
           {"<>", ""},
       })
    EXPECT_EQ(function_identifier(c.function), c.identifier) << c.function;
}

TEST(Identifier, TheQualifiedNameAsScopes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(qualified_name("nll_loss_forward_reduce_cuda_kernel_2d"), (V{"nll_loss_forward_reduce_cuda_kernel_2d"}));
  EXPECT_EQ(qualified_name("void at::native::(anonymous namespace)::index_kernel<float, 4>(float*, long)"),
            (V{"at", "native", "", "index_kernel"}));
  EXPECT_EQ(qualified_name("void <unnamed>::k<int>(int*)"), (V{"", "k"}));
  EXPECT_EQ(qualified_name("{anonymous}::k"), (V{"", "k"}));
  EXPECT_EQ(qualified_name("ns::baz<Op<int>>"), (V{"ns", "baz"}));
  EXPECT_EQ(qualified_name("b::foo"), (V{"b", "foo"}));
  EXPECT_EQ(qualified_name(""), V{});
}

// Whether a function the device's assert names can be a __global__ one: void, no class member, no operator.
TEST(Identifier, WhichFunctionsCanBeKernels) {
  for (const char* f : {"nll_loss_forward_reduce_cuda_kernel_2d", "b::foo", "void foo(T*) [with T = float]",
                        "void at::native::(anonymous namespace)::index_kernel<float, 4>(float*, long)",
                        "void cub::CUB_200_SM_800::DeviceReduceKernel<Policy, float*>(float*)", "{anonymous}::k"})
    EXPECT_TRUE(may_be_kernel(f)) << f;
  for (const char* f :
       {"operator()", "void Op<float>::apply(int)", "int helper(int)", "void S::f() const", "void f(int) &&",
        "Foo::Foo", "Foo::~Foo", "",
        "void at::native::index_put_kernel_impl<OpaqueType<1>>(TensorIterator&)::<lambda(char*)>::operator()(char*) "
        "const"})
    EXPECT_FALSE(may_be_kernel(f)) << f;
}

}  // namespace
}  // namespace cdsa::base
