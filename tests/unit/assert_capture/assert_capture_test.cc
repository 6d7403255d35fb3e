// The assert-text capture: what a driver call prints to stderr through stdio is
// captured, published for the whole process whichever thread printed it, and the
// stderr bytes stay exactly what the program printed.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "shim/common/thread_slots.h"
#include "shim/record/assert_capture.h"

extern "C" int __fprintf_chk(FILE*, int, const char*, ...);

namespace cdsa {
namespace {

// fd 2 goes to a temporary file while a test prints; its bytes are read back.
class StderrToFile {
 public:
  StderrToFile() {
    char path[] = "/tmp/cdsa_capture_XXXXXX";
    fd_ = mkstemp(path);
    unlink(path);
    fflush(stderr);
    saved_ = dup(2);
    dup2(fd_, 2);
  }
  ~StderrToFile() { restore(); }
  std::string restore() {
    if (saved_ < 0) return text_;
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    lseek(fd_, 0, SEEK_SET);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof buf)) > 0) text_.append(buf, static_cast<size_t>(n));
    close(fd_);
    return text_;
  }

 private:
  int fd_ = -1, saved_ = -1;
  std::string text_;
};

TEST(AssertCapture, EveryStdioRouteIsCapturedInsideADriverCallAndTheBytesAreUnchanged) {
  StderrToFile redirect;
  fprintf(stderr, "before the call\n");  // outside a driver call: not captured
  std::string captured;
  {
    DriverCallScope call;
    fprintf(stderr, "fprintf %d|", 1);
    __fprintf_chk(stderr, 1, "chk %s|", "two");
    fputs("fputs|", stderr);
    fwrite("fwrite|", 1, 7, stderr);
    fputc('c', stderr);
    putc('p', stderr);
    dprintf(2, "|dprintf %x|", 255);
    write(2, "write\n", 6);
    fprintf(stdout, "%s", "");  // stdout is not stderr: nothing captured
    captured = captured_driver_stderr();
  }
  fputs("after the call\n", stderr);
  std::string bytes = redirect.restore();
  const std::string inside = "fprintf 1|chk two|fputs|fwrite|cp|dprintf ff|write\n";
  EXPECT_EQ(bytes, "before the call\n" + inside + "after the call\n");
  EXPECT_EQ(captured, inside);
  EXPECT_EQ(kept_device_text(), "");  // no assert line: nothing published
}

TEST(AssertCapture, TextFromAnotherThreadIsPublishedAndAwaited) {
  StderrToFile redirect;
  using Clock = std::chrono::steady_clock;
  // Nobody inside a driver call: nothing to wait for.
  EXPECT_FALSE(other_thread_in_driver_call());
  EXPECT_FALSE(wait_for_device_text(Clock::now() + std::chrono::seconds(30)));

  std::mutex m;
  std::condition_variable cv;
  int stage = 0;  // 1: the thread is inside its call; 2: it may print; 3: it may return
  auto wait_stage = [&](int s) {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return stage >= s; });
  };
  auto set_stage = [&](int s) {
    std::lock_guard<std::mutex> lock(m);
    stage = s;
    cv.notify_all();
  };

  // A thread inside a call that prints nothing: the wait ends at its deadline without text.
  std::thread silent([&] {
    DriverCallScope call;
    set_stage(1);
    wait_stage(3);
  });
  wait_stage(1);
  EXPECT_TRUE(other_thread_in_driver_call());
  EXPECT_FALSE(wait_for_device_text(Clock::now() + std::chrono::milliseconds(20)));
  set_stage(3);
  silent.join();
  EXPECT_FALSE(other_thread_in_driver_call());

  // A thread that prints the assert line in pieces while the main thread waits for it.
  const std::string line = "Loss.cu:250: nll: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0` failed.\n";
  stage = 0;
  std::thread printer([&] {
    DriverCallScope call;
    set_stage(1);
    wait_stage(2);
    fputs("Loss.cu:250: nll: block: [0,0,0], ", stderr);
    fprintf(stderr, "thread: [%d,0,0] Assertion `%s` failed.", 2, "t >= 0");
    fputc('\n', stderr);
    wait_stage(3);  // still inside its call while the main thread reads the text
  });
  wait_stage(1);
  set_stage(2);
  EXPECT_TRUE(wait_for_device_text(Clock::now() + std::chrono::seconds(60)));
  EXPECT_EQ(kept_device_text(), line);
  EXPECT_EQ(captured_driver_stderr(), "");  // the main thread printed nothing itself
  set_stage(3);
  printer.join();

  // Another thread's later text does not replace it.
  std::thread later([&] {
    DriverCallScope call;
    fprintf(stderr, "Other.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.\n");
  });
  later.join();
  EXPECT_EQ(kept_device_text(), line);
  std::string bytes = redirect.restore();
  EXPECT_EQ(bytes, line + "Other.cu:1: k: block: [0,0,0], thread: [0,0,0] Assertion `x` failed.\n");
}

}  // namespace
}  // namespace cdsa

namespace cdsa {
namespace {

using Clock = std::chrono::steady_clock;

// Launches in flight: another thread's launch, between the driver call and its record, is counted and awaited;
// the caller's own launch never is (the faulting thread may be inside a launch wrapper itself).
TEST(LaunchesInFlight, OtherThreadsAreCountedAndAwaitedButNeverTheCaller) {
  EXPECT_EQ(other_threads_launches_in_flight(), 0);
  {
    DriverCallScope call;
    LaunchInFlight mine;
    LaunchInFlight nested;  // a CUPTI callback inside a wrapped launch
    EXPECT_EQ(other_threads_launches_in_flight(), 0);
    EXPECT_EQ(wait_for_launches_in_flight(Clock::now() + std::chrono::seconds(60)), 0);  // returns at once
  }

  std::mutex m;
  std::condition_variable cv;
  int stage = 0;
  auto set_stage = [&](int s) {
    std::lock_guard<std::mutex> l(m);
    stage = s;
    cv.notify_all();
  };
  auto wait_stage = [&](int s) {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return stage >= s; });
  };
  bool recorded = false;  // stands for the launch's record in the ring
  std::thread launcher([&] {
    DriverCallScope call;
    {
      LaunchInFlight in_flight;
      set_stage(1);
      wait_stage(2);  // "inside the driver call" until the main thread has seen it in flight
      {
        LaunchInFlight nested;  // nesting does not end the launch early
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      recorded = true;  // record_launch, then the launch retires
    }
    wait_stage(3);  // still inside a driver call, no longer launching
  });
  wait_stage(1);
  EXPECT_EQ(other_threads_launches_in_flight(), 1);
  {
    DriverCallScope call;  // the waiting thread inside a launch of its own: still counts only the other one
    LaunchInFlight mine;
    EXPECT_EQ(other_threads_launches_in_flight(), 1);
    // Bounded: the other launch is still held in flight, so a short wait gives up and says one is left.
    auto t0 = Clock::now();
    EXPECT_EQ(wait_for_launches_in_flight(t0 + std::chrono::milliseconds(20)), 1);
    EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(20));
    set_stage(2);
    EXPECT_EQ(wait_for_launches_in_flight(Clock::now() + std::chrono::seconds(60)), 0);
    EXPECT_TRUE(recorded);  // what the retiring thread wrote before retiring is visible after the wait
  }
  EXPECT_EQ(other_threads_launches_in_flight(), 0);
  EXPECT_TRUE(other_thread_in_driver_call());
  set_stage(3);
  launcher.join();
  EXPECT_EQ(other_threads_launches_in_flight(), 0);
}

}  // namespace
}  // namespace cdsa
