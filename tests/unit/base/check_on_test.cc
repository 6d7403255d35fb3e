// base/check.h turned on (as in sanitizer builds): a false CDSA_DCHECK writes its one line and aborts; a true one
// evaluates its condition once and goes on.
#define CDSA_DCHECK_ON 1
#include <gtest/gtest.h>

#include "base/check.h"

namespace cdsa::base {
namespace {

TEST(DcheckOn, TrueGoesOnFalseAbortsWithItsLine) {
  static_assert(CDSA_DCHECK_ENABLED == 1);
  int evaluated = 0;
  CDSA_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, 1);
  const int seq = 0;
  EXPECT_DEATH(CDSA_DCHECK(seq != 0), "^cdsa: internal check failed: .*check_on_test\\.cc:[0-9]+: seq != 0\n$");
}

}  // namespace
}  // namespace cdsa::base
