// Error values for cdsa's offline code (the trace reader, the ELF reader, the CLI): a Status is ok or one line
// saying what is wrong; a StatusOr<T> is a T or such a line. The line is for a person: what is wrong and where
// ("report.candidates[0].launch.grid: expected an array of 3 unsigned 32-bit integers"); callers add what they
// know ("cdsa report: FILE: ..."), with prefixed().
//
// Contract: plain values (copyable, movable), no exceptions, allocate. Not for the launch path. [[nodiscard]]:
// an ignored error is a compile warning.
//
//   base::StatusOr<TraceFile> t = read_trace_file(path);
//   if (!t.ok()) return fail(t.status().prefixed(path));
//   use(*t);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace cdsa::base {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  // An error; an empty message reads "unknown error" (an error is never mistaken for ok).
  static Status error(std::string message) {
    Status s;
    s.message_ = message.empty() ? std::string("unknown error") : std::move(message);
    return s;
  }
  bool ok() const { return message_.empty(); }
  // "" when ok.
  const std::string& message() const { return message_; }
  // "where: message" (ok stays ok).
  Status prefixed(std::string_view where) const {
    if (ok() || where.empty()) return *this;
    return error(std::string(where) + ": " + message_);
  }

 private:
  std::string message_;
};

template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit, as a return value
  // An error (an ok Status here is a caller's mistake: it reads as an unknown error, never as a value).
  StatusOr(Status error) : status_(error.ok() ? Status::error("") : std::move(error)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // The value; only when ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace cdsa::base
