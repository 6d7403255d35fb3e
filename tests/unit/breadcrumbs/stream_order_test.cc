// Regions of a stream's order (shim/record/stream_order.h): regions that do not overlap leave the stream in order;
// any two that do, in either order of entry and exit, raise raced_to past the launches recorded when they exit.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "shim/record/stream_order.h"

namespace cdsa {
namespace {

uint32_t open_regions(const StreamState& st) { return static_cast<uint32_t>(st.regions.load()); }

TEST(StreamOrder, RegionsOneAfterAnotherLeaveTheStreamInOrder) {
  StreamState st;
  for (int i = 0; i < 3; ++i) {
    begin_thread_region(&st);
    st.launched.fetch_add(1);
    { StreamRegion mark(&st); }  // the launch's own mark: part of its region, no second one
    EXPECT_EQ(open_regions(st), 1u);
    end_thread_region();
    { StreamRegion deferred(&st); }  // a deferred mark placed later, alone
  }
  EXPECT_EQ(open_regions(st), 0u);
  EXPECT_EQ(st.regions.load() >> 32, 6u);  // three launches, three placements
  EXPECT_EQ(st.raced_to.load(), 0u);
}

TEST(StreamOrder, ANestedEntryForTheSameStreamIsNoSecondRegion) {
  StreamState st;
  begin_thread_region(&st);
  begin_thread_region(&st);  // the CUPTI callback inside a wrapped launch
  EXPECT_EQ(open_regions(st), 1u);
  EXPECT_EQ(thread_region_stream(), &st);
  end_thread_region();
  end_thread_region();  // nothing held: nothing to end
  EXPECT_EQ(open_regions(st), 0u);
  EXPECT_EQ(thread_region_stream(), nullptr);
  EXPECT_EQ(st.raced_to.load(), 0u);
}

TEST(StreamOrder, OverlappingRegionsRaiseRacedToPastWhatWasRecorded) {
  StreamState st;
  st.launched.store(4);
  {
    StreamRegion first(&st);
    StreamRegion second(&st);  // begins while the first is open
    st.launched.store(6);
  }
  EXPECT_EQ(st.raced_to.load(), 7u);
  EXPECT_EQ(open_regions(st), 0u);
  // Later regions alone change nothing, and raced_to never goes down.
  st.launched.store(9);
  { StreamRegion alone(&st); }
  EXPECT_EQ(st.raced_to.load(), 7u);
}

TEST(StreamOrder, ARecordOutsideItsLaunchsRegionCountsAsOverlapping) {
  StreamState st;
  st.launched.store(2);
  { StreamRegion outside(&st, /*overlap=*/true); }
  EXPECT_EQ(st.raced_to.load(), 3u);
}

// Two threads: the one that entered first learns of the other at its exit (the entries changed), the other at its
// entry; each raises raced_to before it exits, so whoever reads the word after both exits sees the raise, and while
// either is open, other_regions_open says so (never counting the reader's own region).
TEST(StreamOrder, TwoThreadsEitherOrderBothSeeTheOverlap) {
  for (int first_exits_first = 0; first_exits_first < 2; ++first_exits_first) {
    SCOPED_TRACE(first_exits_first ? "the first region exits first" : "the second region exits first");
    StreamState st;
    std::atomic<int> step{0};
    std::thread a([&] {
      begin_thread_region(&st);
      EXPECT_FALSE(other_regions_open(&st));
      EXPECT_FALSE(own_region_overlapped(&st));
      st.launched.fetch_add(1);
      step.store(1);
      while (step.load() < 2) std::this_thread::yield();
      EXPECT_TRUE(other_regions_open(&st));
      step.store(3);
      if (first_exits_first) {
        end_thread_region();
        step.store(4);
      } else {
        while (step.load() < 4) std::this_thread::yield();
        end_thread_region();
      }
    });
    while (step.load() < 1) std::this_thread::yield();
    EXPECT_TRUE(other_regions_open(&st));
    begin_thread_region(&st);
    EXPECT_TRUE(own_region_overlapped(&st));
    st.launched.fetch_add(1);
    step.store(2);
    while (step.load() < 3) std::this_thread::yield();
    if (first_exits_first) {
      while (step.load() < 4) std::this_thread::yield();
      EXPECT_GE(st.raced_to.load(), 2u);  // raised by the thread that entered first, before it exited
      end_thread_region();
    } else {
      end_thread_region();
      EXPECT_GE(st.raced_to.load(), 3u);  // the second region's raise: one past both launches
      step.store(4);
    }
    a.join();
    EXPECT_EQ(st.raced_to.load(), 3u);
    EXPECT_EQ(open_regions(st), 0u);
    EXPECT_FALSE(other_regions_open(&st));
  }
}

}  // namespace
}  // namespace cdsa
