// Unit test of the simulated CUDA driver (tests/sim/libcuda.so.1): the main of sim_test, whose tests are in
// sim_*_test.cc (one file per area of the sim; helpers in sim_test_support.h).
//
// Faults are sticky for the whole process, so every scenario that faults (or
// that needs a process where cuInit was never called, or that exercises exit)
// runs in a child process through a gtest death test (threadsafe style:
// the child re-executes this binary) and reports back through its exit code
// and stderr.

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
