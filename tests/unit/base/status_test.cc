// base/status.h: a Status is ok or one line; a StatusOr<T> holds a value or an error, never both, and an ok
// Status handed to it as an error still reads as one.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace cdsa::base {
namespace {

StatusOr<int> half(int x) {
  if (x % 2) return Status::error("odd: " + std::to_string(x));
  return x / 2;
}

TEST(Status, OkOrOneLineWithWhereInFront) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
  EXPECT_TRUE(ok.prefixed("file.json").ok());
  Status bad = Status::error("expected a string");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.prefixed("file.json").message(), "file.json: expected a string");
  EXPECT_EQ(bad.prefixed("").message(), "expected a string");
  EXPECT_FALSE(Status::error("").ok());  // an error is never mistaken for ok
  EXPECT_EQ(Status::error("").message(), "unknown error");
}

TEST(StatusOr, ValueOrError) {
  StatusOr<int> h = half(8);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, 4);
  EXPECT_TRUE(h.status().ok());
  StatusOr<int> o = half(7);
  EXPECT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(), "odd: 7");
  StatusOr<int> from_ok{Status()};  // a caller's mistake reads as an error, not as a value
  EXPECT_FALSE(from_ok.ok());
  EXPECT_EQ(from_ok.status().message(), "unknown error");
}

TEST(StatusOr, MovesItsValueOut) {
  StatusOr<std::unique_ptr<std::string>> p = std::make_unique<std::string>("trace");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(**p, "trace");
  std::unique_ptr<std::string> taken = std::move(p).value();
  EXPECT_EQ(*taken, "trace");
  StatusOr<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);
}

}  // namespace
}  // namespace cdsa::base
