// Deferred marks (shim/record/breadcrumbs.h): a launch's mark waits for its stream's next operation, which enqueues
// it, or, being a PDL launch, folds it. Breadcrumbs are not registered here (no driver): an enqueue then succeeds
// without a driver call, so these tests see the bookkeeping alone.
#include <gtest/gtest.h>

#include <cstdint>

#include "shim/common/reentrancy.h"
#include "shim/record/breadcrumbs.h"
#include "shim/record/recorder.h"

namespace cdsa {
namespace {

class Deferral : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(recorder_init());
    slot_ = stream_slot(next_id_++);
    ASSERT_GE(slot_, 0);
    st_ = stream_state(slot_);
  }
  // Launch `seq` was recorded (its number handed out) and its mark deferred.
  void defer(uint64_t seq, bool programmatic = false) {
    if (st_->launched.load() < seq) st_->launched.store(seq);
    defer_breadcrumb(st_, seq, programmatic);
  }
  static inline uint64_t next_id_ = 500;
  int slot_ = -1;
  StreamState* st_ = nullptr;
};

TEST_F(Deferral, TheNextOperationEnqueuesTheDeferredMark) {
  InCdsa guard;
  defer(1);
  EXPECT_EQ(st_->deferred.load(), 1u);
  EXPECT_EQ(st_->breadcrumb_launched.load(), 0u);  // nothing enqueued yet: the mark waits
  EXPECT_EQ(settle_breadcrumb(guard, nullptr, slot_, /*fold*/ false), CUDA_SUCCESS);
  EXPECT_EQ(st_->deferred.load(), 0u);
  EXPECT_EQ(st_->breadcrumb_launched.load(), 1u);
  // Nothing deferred: a second operation changes nothing.
  EXPECT_EQ(settle_breadcrumb(guard, nullptr, slot_, false), CUDA_SUCCESS);
  EXPECT_EQ(st_->breadcrumb_launched.load(), 1u);
}

TEST_F(Deferral, APdlLaunchFoldsTheMarkBeforeIt) {
  InCdsa guard;
  defer(1);
  settle_breadcrumb(guard, nullptr, slot_, /*fold*/ true);  // launch 2 is a PDL launch
  EXPECT_EQ(st_->deferred.load(), 0u);
  EXPECT_EQ(st_->breadcrumb_launched.load(), 0u);  // launch 1 has no mark of its own: launch 2's covers it
  defer(2);
  settle_breadcrumb(guard, nullptr, slot_, false);  // launch 3 is plain
  EXPECT_EQ(st_->breadcrumb_launched.load(), 2u);
}

TEST_F(Deferral, TheEnqueuedNumberNeverGoesBack) {
  InCdsa guard;
  defer(5);
  settle_breadcrumb(guard, nullptr, slot_, false);
  defer(4);  // a racing thread's older launch, settled late
  settle_breadcrumb(guard, nullptr, slot_, false);
  EXPECT_EQ(st_->breadcrumb_launched.load(), 5u);
}

TEST_F(Deferral, AnUnknownSlotIsIgnored) {
  InCdsa guard;
  EXPECT_EQ(settle_breadcrumb(guard, nullptr, -1, false), CUDA_SUCCESS);
  EXPECT_EQ(find_stream_slot(999999), -1);  // a lookup creates nothing
  EXPECT_EQ(find_stream_slot(next_id_ - 1), slot_);
}

}  // namespace
}  // namespace cdsa
