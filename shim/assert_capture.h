// Captures the device's assert text ("Loss.cu:250: nll_loss_...: block: [0,0,0],
// thread: [2,0,0] Assertion `t >= 0 && t < n_classes` failed.") as the driver
// writes it to stderr, without touching the program's stderr.
//
// How: libcdsa.so interposes write(2). While a thread is inside a wrapped driver
// call (DriverCallScope), bytes that call writes to fd 2 are also copied into a
// small per-thread buffer; everything still goes to the real write unchanged.
// Outside driver calls the hook is one thread-local test and a jump.
//
// Contract: DriverCallScope is allocation-free and lock-free. `take_captured_text`
// returns what this thread's current driver call wrote to fd 2 (up to 8 KiB).
#pragma once

#include <string>
#include <vector>

namespace cdsa {

struct DriverCallScope {
  DriverCallScope() noexcept;
  ~DriverCallScope();
};

std::string captured_driver_stderr();
// Text printed by a driver call that cdsa itself made (a breadcrumb write that
// met the fault first): kept until the report. Thread-safe; keeps the first.
void keep_device_text(const std::string& text);
std::string kept_device_text();

// One parsed device assert line.
struct DeviceAssert {
  std::string file;
  int line = 0;
  std::string function;  // the function holding the assert (often the kernel)
  std::string message;   // the whole line
};
std::vector<DeviceAssert> parse_device_asserts(const std::string& text);

}  // namespace cdsa
