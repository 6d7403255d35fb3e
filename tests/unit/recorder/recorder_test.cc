// The recorder's tables under concurrency: string and stack interning, the
// launch ring's seqlock, stream slots, handle maps. Also run under TSan.
#include "shim/record/recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shim/common/config.h"

namespace cdsa {
namespace {

class RecorderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    load_config();
    ASSERT_TRUE(recorder_init());
  }
};

TEST_F(RecorderTest, InternedStringsAreStableAndDistinct) {
  uint32_t a = intern_string("alpha", 5), b = intern_string("beta", 4), a2 = intern_string("alpha", 5);
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  EXPECT_STREQ(string_at(a), "alpha");
  EXPECT_STREQ(string_at(b), "beta");
  EXPECT_EQ(intern_string("alphabet", 5), a);  // length, not NUL, delimits
  EXPECT_STREQ(string_at(kNoString), "");
}

TEST_F(RecorderTest, ConcurrentInterningAgreesOnIds) {
  constexpr int kThreads = 8, kStrings = 2000;
  std::vector<std::vector<uint32_t>> ids(kThreads, std::vector<uint32_t>(kStrings));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kStrings; ++i) {
        int k = (i * 7 + t * 13) % kStrings;  // different order per thread
        std::string s = "kernel_" + std::to_string(k);
        ids[t][k] = intern_string(s.data(), s.size());
      }
    });
  for (auto& th : threads) th.join();
  std::set<uint32_t> distinct;
  for (int k = 0; k < kStrings; ++k) {
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(ids[t][k], ids[0][k]) << "string " << k;
    distinct.insert(ids[0][k]);
    EXPECT_EQ(std::string(string_at(ids[0][k])), "kernel_" + std::to_string(k));
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kStrings));
}

__attribute__((noinline)) uint32_t site_a() {
  uint32_t id = capture_and_intern_stack();
  asm volatile("" ::: "memory");
  return id;
}
__attribute__((noinline)) uint32_t site_b() {
  uint32_t id = capture_and_intern_stack();
  asm volatile("" ::: "memory");
  return id;
}

TEST_F(RecorderTest, SameCallSiteSameStackAcrossThreads) {
  constexpr int kThreads = 8, kIters = 2000;
  std::vector<std::set<uint32_t>> seen_a(kThreads), seen_b(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        seen_a[t].insert(site_a());
        seen_b[t].insert(site_b());
      }
    });
  for (auto& th : threads) th.join();
  std::set<uint32_t> all_a, all_b;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen_a[t].size(), 1u);
    ASSERT_EQ(seen_b[t].size(), 1u);
    all_a.insert(*seen_a[t].begin());
    all_b.insert(*seen_b[t].begin());
  }
  // Every thread runs the same code from the same entry point: one stack per site.
  EXPECT_EQ(all_a.size(), 1u);
  EXPECT_EQ(all_b.size(), 1u);
  uint32_t a = *all_a.begin(), b = *all_b.begin();
  ASSERT_NE(a, kUnknownStack);
  EXPECT_NE(a, b);
  Stack sa, sb;
  ASSERT_TRUE(stack_at(a, &sa));
  ASSERT_TRUE(stack_at(b, &sb));
  ASSERT_FALSE(sa.native.empty());
  EXPECT_TRUE(sa.python.empty());  // no interpreter in this test
  // Outside libcdsa.so the recorder's own frames are not trimmed; the stacks differ at the two sites.
  EXPECT_NE(sa.native, sb.native);
  EXPECT_EQ(sa.native.size(), sb.native.size());
}

TEST_F(RecorderTest, RingSnapshotsAreNeverTorn) {
  constexpr int kWriters = 4, kPerWriter = 50000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0}, checked{0};
  std::thread reader([&] {
    std::vector<LaunchRecord> snap;
    while (!done.load()) {
      ring_snapshot(&snap);
      for (const auto& r : snap) {
        // Writers derive every field from seq; a torn copy would mix two records.
        if (r.stream_seq != r.seq * 3 || r.stamp != r.seq + 7 || r.grid[0] != static_cast<uint32_t>(r.seq) ||
            r.tid != static_cast<uint32_t>(r.seq % 100000))
          torn.fetch_add(1);
        checked.fetch_add(1);
      }
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&] {
      for (int i = 0; i < kPerWriter; ++i) {
        LaunchRecord r;
        r.seq = next_launch_seq();
        r.stream_seq = r.seq * 3;
        r.stamp = r.seq + 7;
        r.grid[0] = static_cast<uint32_t>(r.seq);
        r.tid = static_cast<uint32_t>(r.seq % 100000);
        ring_publish(r);
      }
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
  std::vector<LaunchRecord> snap;
  ring_snapshot(&snap);
  // The ring keeps the newest ring_size records, oldest first (a writer lagging a whole ring behind may
  // lose its record to the newer one: at most one per writer).
  ASSERT_GE(snap.size(), static_cast<size_t>(config().ring_size) - kWriters);
  ASSERT_LE(snap.size(), static_cast<size_t>(config().ring_size));
  for (size_t i = 1; i < snap.size(); ++i) ASSERT_GT(snap[i].seq, snap[i - 1].seq);
  EXPECT_GT(snap.front().seq, launches_recorded() - config().ring_size);
  EXPECT_EQ(snap.back().seq, launches_recorded());
}

TEST_F(RecorderTest, StreamSlotsAreStablePerId) {
  constexpr int kThreads = 6;
  std::vector<std::vector<int>> slots(kThreads, std::vector<int>(300));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) slots[t][i] = stream_slot(1000 + static_cast<uint64_t>(i));
    });
  for (auto& th : threads) th.join();
  std::set<int> distinct;
  for (int i = 0; i < 300; ++i) {
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(slots[t][i], slots[0][i]);
    ASSERT_GE(slots[0][i], 0);
    distinct.insert(slots[0][i]);
    EXPECT_EQ(stream_state(slots[0][i])->id.load(), 1000u + i + 1);
  }
  EXPECT_EQ(distinct.size(), 300u);
  EXPECT_EQ(stream_slot(0), stream_slot(0));  // id 0 is a valid stream id
}

TEST_F(RecorderTest, HandleMapsKeepTheirValues) {
  EXPECT_EQ(handle_map_get(HandleMap::KernelName, 0x1234), kNoString);
  uint32_t name = intern_string("mapped_kernel", 13);  // kernel names are string ids, pinned by the map
  handle_map_put(HandleMap::KernelName, 0x1234, name);
  handle_map_put(HandleMap::GraphExec, 0x1234, 7);
  EXPECT_EQ(handle_map_get(HandleMap::KernelName, 0x1234), name);
  handle_map_put(HandleMap::KernelName, 0x5678, kNoString - 1);  // a caller's sentinel is kept as it is
  EXPECT_EQ(handle_map_get(HandleMap::KernelName, 0x5678), kNoString - 1);
  EXPECT_EQ(handle_map_get(HandleMap::GraphExec, 0x1234), 7u);
  handle_map_put(HandleMap::GraphExec, 0x1234, 0);  // overwritten when a handle is reused
  EXPECT_EQ(handle_map_get(HandleMap::GraphExec, 0x1234), 0u);
}

}  // namespace
}  // namespace cdsa
