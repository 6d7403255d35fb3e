// base/check.h as this build has it: in a release build a CDSA_DCHECK does not evaluate its condition (nothing on
// the launch path); in a sanitizer build (CDSA_SANITIZE) it is on.
#include <gtest/gtest.h>

#include "base/check.h"

namespace cdsa::base {
namespace {

TEST(DcheckThisBuild, OnExactlyInSanitizerBuilds) {
  int evaluated = 0;
  CDSA_DCHECK(++evaluated > 0);
#if defined(CDSA_DCHECK_ON) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_EQ(CDSA_DCHECK_ENABLED, 1);
  EXPECT_EQ(evaluated, 1);
#else
  EXPECT_EQ(CDSA_DCHECK_ENABLED, 0);
  EXPECT_EQ(evaluated, 0);  // not evaluated: a release build pays nothing for a check
#endif
}

}  // namespace
}  // namespace cdsa::base
