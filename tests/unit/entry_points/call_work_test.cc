// call_work (shim/intercept/front_end.h): what a call CUPTI reports does to the streams, read from the entry-point
// table by name and from CUPTI's parameter block. The stream's place in the block comes from the prototype by C's
// layout rules; here it is checked against CUPTI's own parameter structs (generated_cuda_meta.h), which are what a
// real callback hands over.
#include <cupti.h>
#include <gtest/gtest.h>

#include <cstddef>

#include "shim/intercept/front_end.h"

namespace cdsa {
namespace {

TEST(CallWork, TheStreamSitsWhereCuptisParameterStructHasIt) {
  struct Case {
    const char* symbol;
    int offset;  // offsetof the stream member of CUPTI's <symbol>_params; -1: none
  };
#define CDSA_AT(symbol, member) {#symbol, static_cast<int>(offsetof(symbol##_params, member))}
  const Case cases[] = {
      CDSA_AT(cuMemcpyHtoDAsync_v2, hStream),      CDSA_AT(cuMemcpyDtoHAsync_v2_ptsz, hStream),
      CDSA_AT(cuMemcpyDtoDAsync_v2, hStream),      CDSA_AT(cuMemsetD8Async, hStream),
      CDSA_AT(cuMemsetD2D16Async, hStream),        CDSA_AT(cuMemcpy2DAsync_v2, hStream),
      CDSA_AT(cuMemcpyPeerAsync, hStream),         CDSA_AT(cuStreamWriteValue32_v2, stream),
      CDSA_AT(cuStreamWaitValue64_v2_ptsz, stream), CDSA_AT(cuStreamBatchMemOp_v2, stream),
      CDSA_AT(cuMemFreeAsync, hStream),            CDSA_AT(cuMemAllocAsync, hStream),
      CDSA_AT(cuLaunchHostFunc, hStream),          CDSA_AT(cuEventRecord, hStream),
      CDSA_AT(cuStreamWaitEvent, hStream),         {"cuCtxSynchronize", -1},
      {"cuNoSuchCall", -1},
  };
#undef CDSA_AT
  for (const Case& c : cases) EXPECT_EQ(call_work_stream_offset(c.symbol), c.offset) << c.symbol;
}

TEST(CallWork, EachKindOfCallIsWhatItsWrapperWouldNote) {
  cuMemcpyHtoDAsync_v2_params copy{};
  copy.hStream = reinterpret_cast<CUstream>(0x5000);
  CallWork w = call_work("cuMemcpyHtoDAsync_v2", &copy);
  EXPECT_EQ(w.what, CallWork::Stream);
  EXPECT_EQ(w.stream, copy.hStream);
  EXPECT_FALSE(w.per_thread);

  cuStreamWriteValue32_v2_ptsz_params memop{};  // the per-thread variant on the NULL stream: the thread's own
  w = call_work("cuStreamWriteValue32_v2_ptsz", &memop);
  EXPECT_EQ(w.what, CallWork::Stream);
  EXPECT_EQ(w.stream, nullptr);
  EXPECT_TRUE(w.per_thread);

  EXPECT_EQ(call_work("cuMemcpyHtoDAsync_v2", nullptr).what, CallWork::Unknown);  // work it cannot place
  EXPECT_EQ(call_work("cuMemcpyHtoD_v2", nullptr).what, CallWork::DefaultStream);
  EXPECT_EQ(call_work("cuMemcpyDtoH_v2", nullptr).what, CallWork::DefaultStream);

  cuStreamSynchronize_params sync{reinterpret_cast<CUstream>(0x6000)};
  w = call_work("cuStreamSynchronize", &sync);
  EXPECT_EQ(w.what, CallWork::StreamSync);
  EXPECT_EQ(w.stream, sync.hStream);
  EXPECT_EQ(call_work("cuCtxSynchronize", nullptr).what, CallWork::CtxSync);
  const CUcontext ctx = reinterpret_cast<CUcontext>(0x7000);
  w = call_work("cuCtxSynchronize_v2", &ctx);  // its block holds the one argument
  EXPECT_EQ(w.what, CallWork::CtxSync);
  EXPECT_EQ(w.ctx, ctx);

  cuStreamWaitEvent_params wait{reinterpret_cast<CUstream>(0x8000), nullptr, 0};
  w = call_work("cuStreamWaitEvent", &wait);
  EXPECT_EQ(w.what, CallWork::StreamOp);
  EXPECT_EQ(w.stream, wait.hStream);

  cuStreamDestroy_v2_params destroy{reinterpret_cast<CUstream>(0x9000)};
  w = call_work("cuStreamDestroy_v2", &destroy);
  EXPECT_EQ(w.what, CallWork::StreamDestroy);
  EXPECT_TRUE(w.names_stream);
  w = call_work("cuCtxDestroy_v2", nullptr);
  EXPECT_EQ(w.what, CallWork::StreamDestroy);
  EXPECT_FALSE(w.names_stream);

  cuStreamQuery_params info{reinterpret_cast<CUstream>(0xa000)};
  EXPECT_EQ(call_work("cuStreamGetPriority", &info).what, CallWork::None);  // takes a stream, puts nothing on it
  EXPECT_EQ(call_work("cuMemAlloc_v2", nullptr).what, CallWork::None);
  // A newer driver's entry point the table lacks: whether it may work, by its name.
  EXPECT_EQ(call_work("cuLaunchKernelFuture_v9", nullptr).what, CallWork::Unknown);
  EXPECT_EQ(call_work("cuDeviceGetFutureAttribute", nullptr).what, CallWork::None);
  EXPECT_EQ(call_work(nullptr, nullptr).what, CallWork::None);
}

}  // namespace
}  // namespace cdsa
