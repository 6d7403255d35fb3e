// The device's assert line, as the CUDA driver prints it for a failed device-side assert() (PyTorch's
// CUDA_KERNEL_ASSERT), and its one parser. The capture (shim/record/assert_capture.cc) recognises the lines with it,
// the fault snapshot parses them with it, and the report model carries the parsed fields (report/fault_report.h),
// so the hints (report/hints.cc) read fields instead of parsing again.
//
//   "Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0` failed."
//     file "Loss.cu", line 250, function "nll_loss_forward_reduce_cuda_kernel_2d", block {0,0,0},
//     thread {2,0,0}, condition "t >= 0", message: the whole line
//
// Contract: pure functions over text; no I/O, no globals; the parsers allocate (the report path only),
// `holds_device_assert` does not (the stdio hooks call it).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace cdsa::base {

// What every device assert line holds between its function and its position: written once, here.
inline constexpr std::string_view kDeviceAssertMarker = ": block: [";

struct DeviceAssert {
  std::string file;       // "" when the line has no FILE:LINE: prefix
  int line = 0;
  std::string function;   // the function holding the assert (often the kernel; "operator()" for lambda kernels)
  std::string condition;  // the asserted expression, "" when the line does not quote it
  bool has_position = false;
  unsigned block[3] = {0, 0, 0}, thread[3] = {0, 0, 0};
  std::string message;  // the whole line, as printed
};

// Whether `n` bytes at `p` hold the marker (a device assert line, or the start of one).
inline bool holds_device_assert(const char* p, size_t n) noexcept {
  return p && memmem(p, n, kDeviceAssertMarker.data(), kDeviceAssertMarker.size()) != nullptr;
}
inline bool holds_device_assert(std::string_view s) noexcept { return holds_device_assert(s.data(), s.size()); }

namespace device_assert_internal {
// "[2,0,0]" at `at`.
inline bool parse_dim3(std::string_view s, size_t at, unsigned out[3]) {
  if (at >= s.size() || s[at] != '[') return false;
  std::string digits(s.substr(at + 1));
  const char* p = digits.c_str();
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p || v > 0xffffffffu) return false;
    out[i] = static_cast<unsigned>(v);
    p = end;
    if (*p != (i < 2 ? ',' : ']')) return false;
    ++p;
  }
  return true;
}
}  // namespace device_assert_internal

// One line (without its newline). False, and *out empty, when it is no device assert line: the marker and
// "Assertion" are both needed.
inline bool parse_device_assert(std::string_view text, DeviceAssert* out) {
  using device_assert_internal::parse_dim3;
  *out = DeviceAssert{};
  const size_t marker = text.find(kDeviceAssertMarker);
  const size_t assertion = text.find("Assertion", marker == std::string_view::npos ? 0 : marker);
  if (marker == std::string_view::npos || assertion == std::string_view::npos) return false;
  out->message = std::string(text);
  // "<file>:<line>: <function>: block: [x,y,z], thread: [x,y,z] Assertion `...` failed."
  size_t function_at = 0;
  const size_t c1 = text.find(':');
  const size_t c2 = c1 == std::string_view::npos ? c1 : text.find(": ", c1 + 1);
  if (c1 < marker && c2 != std::string_view::npos && c2 <= marker) {
    out->file = std::string(text.substr(0, c1));
    out->line = atoi(std::string(text.substr(c1 + 1, c2 - c1 - 1)).c_str());
    function_at = c2 + 2;
  }
  out->function = function_at <= marker ? std::string(text.substr(function_at, marker - function_at)) : std::string();
  const size_t at_block = marker + kDeviceAssertMarker.size() - 1;  // the '['
  constexpr std::string_view kThread = ", thread: ";
  const size_t t = text.find(kThread, marker);
  out->has_position = t != std::string_view::npos && parse_dim3(text, at_block, out->block) &&
                      parse_dim3(text, t + kThread.size(), out->thread);
  constexpr std::string_view kQuote = "Assertion `";
  const size_t q = text.find(kQuote, marker);
  const size_t q_end = q == std::string_view::npos ? q : text.find("` failed", q + kQuote.size());
  if (q_end != std::string_view::npos) out->condition = std::string(text.substr(q + kQuote.size(), q_end - q - kQuote.size()));
  return true;
}

// Every device assert line of `text` (several lines), in order. Lines starting "cdsa:" are skipped: cdsa's own
// report quoting a device line, printed inside a driver call.
inline std::vector<DeviceAssert> parse_device_asserts(std::string_view text) {
  std::vector<DeviceAssert> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, 5) == "cdsa:") continue;
    DeviceAssert a;
    if (parse_device_assert(line, &a)) out.push_back(std::move(a));
  }
  return out;
}

}  // namespace cdsa::base
