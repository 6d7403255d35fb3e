// Driver-call slots (shim/common/thread_slots.h): a thread returns its slot when it exits, so a program that starts
// more threads over its life than there are slots still gives each its own; a live thread's slot is never
// handed to another.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "shim/common/thread_slots.h"
#include "shim/record/assert_capture.h"

namespace cdsa {
namespace {

constexpr int kThreadsOverTheRun = 600;  // more than the 512 slots

// Runs `n` short threads one after the other, each making a driver call with a launch in flight (as a wrapped
// cuLaunchKernel does); returns how many of them had no slot of their own.
int threads_without_a_slot(int n) {
  int without = 0;
  for (int i = 0; i < n; ++i) {
    std::thread t([&] {
      DriverCallScope call;
      LaunchInFlight launch;
      if (!driver_call_slot_held()) ++without;
    });
    t.join();  // its thread-exit destructors have run
  }
  return without;
}

TEST(BusySlots, ThreadsThatExitedGiveTheirSlotsToNewThreads) {
  EXPECT_EQ(threads_without_a_slot(kThreadsOverTheRun), 0);
  EXPECT_FALSE(other_thread_in_driver_call());
  EXPECT_EQ(other_threads_launches_in_flight(), 0);
}

TEST(BusySlots, LiveThreadsKeepTheirSlotsWhileOthersComeAndGo) {
  constexpr int kHolders = 3;
  std::mutex m;
  std::condition_variable cv;
  int ready = 0;
  bool release = false;
  std::atomic<int> held{0};
  std::vector<std::thread> holders;
  for (int i = 0; i < kHolders; ++i)
    holders.emplace_back([&] {
      DriverCallScope call;
      LaunchInFlight launch;  // in flight until released
      if (driver_call_slot_held()) ++held;
      std::unique_lock<std::mutex> l(m);
      ++ready;
      cv.notify_all();
      cv.wait(l, [&] { return release; });
    });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return ready == kHolders; });
  }
  EXPECT_EQ(held.load(), kHolders);
  EXPECT_EQ(threads_without_a_slot(kThreadsOverTheRun), 0);
  // Had a finished thread's slot gone to a holder's, or a holder's to a new thread, the count would be off.
  EXPECT_EQ(other_threads_launches_in_flight(), kHolders);
  EXPECT_TRUE(other_thread_in_driver_call());
  {
    std::lock_guard<std::mutex> l(m);
    release = true;
  }
  cv.notify_all();
  for (auto& t : holders) t.join();
  EXPECT_EQ(other_threads_launches_in_flight(), 0);
  EXPECT_FALSE(other_thread_in_driver_call());
}

}  // namespace
}  // namespace cdsa
