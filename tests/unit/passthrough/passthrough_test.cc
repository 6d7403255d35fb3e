#include "shim/common/passthrough.h"

#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace cdsa {
namespace {

// More arguments than registers (x86-64: 6 integer and 8 vector registers; aarch64: 8 and 8), mixed kinds, a struct
// by value and a return value in a register pair: whatever the thunk touched, one of them would come out wrong.
struct Pair {
  uint64_t a, b;
};
struct Big {
  uint64_t w[5];  // passed in memory on both architectures
};
__attribute__((noinline)) Pair many(uint64_t a1, double d1, uint32_t a2, float f1, void* a3, uint64_t a4, double d2,
                                    uint8_t a5, uint64_t a6, double d3, uint64_t a7, double d4, double d5, uint64_t a8,
                                    double d6, double d7, double d8, double d9, uint16_t a9, Big big, uint64_t a10) {
  uint64_t sum = a1 + a2 + reinterpret_cast<uintptr_t>(a3) + a4 + a5 + a6 + a7 + a8 + a9 + a10;
  for (uint64_t w : big.w) sum = sum * 31 + w;
  double ds = d1 + f1 + d2 + d3 + d4 + d5 + d6 + d7 + d8 + d9;
  return {sum, static_cast<uint64_t>(ds * 1000)};
}
using ManyFn = decltype(&many);

__attribute__((noinline)) int sum_varargs(int n, ...) {
  va_list ap;
  va_start(ap, n);
  int s = 0;
  for (int i = 0; i < n; ++i) s += va_arg(ap, int);
  va_end(ap);
  return s;
}

Pair call_many(ManyFn f) {
  Big big{{11, 12, 13, 14, 15}};
  return f(1, 0.5, 2, 0.25f, reinterpret_cast<void*>(3), 4, 1.5, 5, 6, 2.5, 7, 3.5, 4.5, 8, 5.5, 6.5, 7.5, 8.5, 9, big,
           10);
}

bool was_called(const char* name, int version) {
  std::vector<PassthroughCall> calls;
  passthrough_called(&calls);
  for (const auto& c : calls)
    if (c.name == name && c.version == version) return true;
  return false;
}

TEST(PassthroughTest, EveryArgumentReachesTheTargetUnchanged) {
  auto t = reinterpret_cast<ManyFn>(passthrough_thunk("cuTestMany", 13990, reinterpret_cast<void*>(&many)));
  ASSERT_NE(t, nullptr);
  EXPECT_NE(reinterpret_cast<void*>(t), reinterpret_cast<void*>(&many));
  EXPECT_TRUE(is_passthrough_thunk(reinterpret_cast<void*>(t)));
  EXPECT_FALSE(is_passthrough_thunk(reinterpret_cast<void*>(&many)));
  Pair want = call_many(&many), got = call_many(t);
  EXPECT_EQ(got.a, want.a);
  EXPECT_EQ(got.b, want.b);
  auto v = reinterpret_cast<int (*)(int, ...)>(passthrough_thunk("cuTestVarargs", 0, reinterpret_cast<void*>(&sum_varargs)));
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v(9, 1, 2, 3, 4, 5, 6, 7, 8, 9), 45);
}

TEST(PassthroughTest, ACallIsSeenOnlyOnceMade) {
  void* t = passthrough_thunk("cuTestLaunchLater", 13990, reinterpret_cast<void*>(&sum_varargs));
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(was_called("cuTestLaunchLater", 13990));  // asked for, never called: nothing changes
  EXPECT_EQ(reinterpret_cast<int (*)(int, ...)>(t)(2, 20, 22), 42);
  EXPECT_TRUE(was_called("cuTestLaunchLater", 13990));
}

TEST(PassthroughTest, TheSameRequestGetsTheSameThunk) {
  void* target = reinterpret_cast<void*>(&many);
  void* a = passthrough_thunk("cuTestSame", 13010, target);
  EXPECT_EQ(passthrough_thunk("cuTestSame", 13010, target), a);
  EXPECT_NE(passthrough_thunk("cuTestSame", 13020, target), a);  // another version: its own called byte
  EXPECT_NE(passthrough_thunk("cuTestSame", 13010, reinterpret_cast<void*>(&sum_varargs)), a);
  // From several threads at once: one thunk per triple.
  std::vector<void*> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&got, i, target] { got[i] = passthrough_thunk("cuTestRace", 13030, target); });
  for (auto& th : threads) th.join();
  for (void* g : got) EXPECT_EQ(g, got[0]);
}

TEST(PassthroughTest, WhichNamesCanChangeWork) {
  for (const char* yes : {"cuLaunchKernel", "cuLaunchHostFunc", "cuStreamBeginRecaptureToGraph",
                          "cuStreamBeginCaptureToCig", "cuGraphAddNode", "cuGraphNodeSetParams", "cuMemcpyAsync",
                          "cuMemsetD8Async", "cuEventRecord", "cuSignalExternalSemaphoresAsync", "cuCtxDestroy",
                          "cuModuleUnload", "cuMemcpyBatchAsync"})
    EXPECT_TRUE(entry_point_changes_work(yes)) << yes;
  for (const char* no : {"cuStreamGetDevResource", "cuGraphNodeGetParams", "cuGraphGetId", "cuGraphExecGetId",
                         "cuGraphNodeGetLocalId", "cuStreamIsCapturing", "cuFuncGetParamCount",
                         "cuCoredumpRegisterStartCallback", "cuStreamGetAttribute", "cuDeviceGetAttribute",
                         "cuMulticastBindMem", "cuEventQuery", "cuDriverGetVersion"})
    EXPECT_FALSE(entry_point_changes_work(no)) << no;
}

// Last: it fills the pool for the rest of the process.
TEST(PassthroughTest, AFullPoolSaysSoAndMakesNoThunk) {
  EXPECT_FALSE(passthrough_pool_exhausted());
  std::vector<void*> made;
  for (int i = 0; i < 4096; ++i) {
    void* t = passthrough_thunk(("cuTestFill" + std::to_string(i)).c_str(), 13000, reinterpret_cast<void*>(&many));
    if (!t) break;
    made.push_back(t);
  }
  EXPECT_LT(made.size(), 4096u);
  EXPECT_TRUE(passthrough_pool_exhausted());
  // Every thunk made is distinct and still works.
  for (size_t i = 1; i < made.size(); ++i) EXPECT_NE(made[i], made[i - 1]);
  Pair want = call_many(&many), got = call_many(reinterpret_cast<ManyFn>(made.back()));
  EXPECT_EQ(got.a, want.a);
}

}  // namespace
}  // namespace cdsa
