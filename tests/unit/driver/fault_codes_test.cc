// Which driver codes start a report (shim/common/driver.h): the sticky faults cuda.h 13 documents as "the process must
// be terminated and relaunched", and the codes of a driver torn down at exit, which the exit probe reads with the
// breadcrumbs (docs/attribution.md, "Which codes are faults").
#include <gtest/gtest.h>

#include "shim/common/driver.h"

namespace cdsa {
namespace {

TEST(FaultCodes, KernelFaultsAreSticky) {
  for (CUresult r :
       {CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_TIMEOUT, CUDA_ERROR_ASSERT, CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC, CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_TENSOR_MEMORY_LEAK})
    EXPECT_TRUE(is_sticky_fault(r)) << r;
}

TEST(FaultCodes, ContainedAndExternalDeviceAreSticky) {
  EXPECT_TRUE(is_sticky_fault(CUDA_ERROR_CONTAINED));        // 226
  EXPECT_TRUE(is_sticky_fault(CUDA_ERROR_EXTERNAL_DEVICE));  // 911
}

TEST(FaultCodes, MpsClientTerminatedAndOrdinaryErrorsAreNot) {
  EXPECT_FALSE(is_sticky_fault(CUDA_ERROR_MPS_CLIENT_TERMINATED));  // 810: usually another client's fault
  for (CUresult r : {CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_READY, CUDA_ERROR_INVALID_HANDLE,
                     CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_DEINITIALIZED,
                     CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED})
    EXPECT_FALSE(is_sticky_fault(r)) << r;
}

TEST(FaultCodes, TornDownCodesAreTheThreeOfATeardown) {
  EXPECT_TRUE(is_torn_down(CUDA_ERROR_DEINITIALIZED));         // 4
  EXPECT_TRUE(is_torn_down(CUDA_ERROR_INVALID_CONTEXT));       // 201
  EXPECT_TRUE(is_torn_down(CUDA_ERROR_CONTEXT_IS_DESTROYED));  // 709
  EXPECT_FALSE(is_torn_down(CUDA_SUCCESS));
  EXPECT_FALSE(is_torn_down(CUDA_ERROR_NOT_READY));
  EXPECT_FALSE(is_torn_down(CUDA_ERROR_ASSERT));
}

}  // namespace
}  // namespace cdsa
