// The per-architecture pieces (base/arch.h): code addresses as the unwinder hands them out, the launch clock's
// counter, the cache's tag compare, and the registers of a captured context.
#include "base/arch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#if defined(__aarch64__)
// cdsa_capture_context is defined by the native walker (shim/stacks/native_unwinder.cc), which this test does not
// link: the same definition, here.
CDSA_ARCH_DEFINE_CAPTURE_CONTEXT();
#endif

namespace cdsa {
namespace {

TEST(Arch, TheNameIsUnameMachine) {
#if defined(__x86_64__)
  EXPECT_STREQ(arch::kName, "x86_64");
#else
  EXPECT_STREQ(arch::kName, "aarch64");
#endif
}

TEST(Arch, APlainCodeAddressIsItsOwnStrippedForm) {
  const auto a = reinterpret_cast<uintptr_t>(&arch::strip_code_address);
  EXPECT_EQ(arch::strip_code_address(a), a);
  EXPECT_EQ(arch::backtrace_pc(a & ~uintptr_t{3}), a & ~uintptr_t{3});
}

#if defined(__aarch64__)
TEST(Arch, SignatureBitsAboveTheUserAddressSpaceAreStripped) {
  // A signature (or a top-byte tag) lives above bit 47 of a user address: whether XPACLRI clears it (a CPU with
  // pointer authentication) or the 48-bit mask does (one without), the address is what remains.
  const uintptr_t a = 0x0000aaaadeadbee0ull;
  EXPECT_EQ(arch::strip_code_address(a | (uintptr_t{0x3f12} << 48)), a);
  EXPECT_EQ(arch::strip_code_address(a | (uintptr_t{0x5a} << 56)), a);
}

TEST(Arch, UnwBacktracesReturnAddressMinusOneIsRoundedBack) {
  // libunwind 1.6's unw_backtrace on aarch64 hands out each return address minus 1; instructions are 4-aligned.
  const uintptr_t ra = 0x0000aaaadeadbee4ull;
  EXPECT_EQ(arch::backtrace_pc(ra - 1), ra);
  EXPECT_EQ(arch::backtrace_pc(ra), ra);
  EXPECT_EQ(arch::backtrace_pc((ra - 1) | (uintptr_t{0x12} << 48)), ra);
}

TEST(Arch, CaptureContextGivesTheCallersPcSpAndFramePointer) {
  ucontext_t uc;
  std::memset(&uc, 0, sizeof uc);
  const uintptr_t fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  EXPECT_EQ(cdsa_capture_context(&uc), 0);
  // pc: just after the call, inside this function; x30 the same; x29 this frame's record.
  EXPECT_EQ(arch::fp_of(uc), fp);
  EXPECT_EQ(arch::lr_of(uc), arch::pc_of(uc));
  EXPECT_NE(arch::pc_of(uc), 0u);
  // sp: this frame's, below its frame record (GCC puts the record at the bottom of the frame).
  EXPECT_LE(arch::sp_of(uc), fp);
  EXPECT_GT(arch::sp_of(uc) + 4096, fp);
}

TEST(Arch, TheGenericTimerCountsForward) {
  EXPECT_NE(arch::counter_frequency(), 0u);
  const uint64_t a = arch::read_counter();
  volatile uint64_t spin = 0;
  for (int i = 0; i < 100000; ++i) spin = spin + 1;
  EXPECT_GT(arch::read_counter(), a);
}
#endif

TEST(Arch, TheTagCompareNamesEveryMatchingWay) {
  alignas(16) uint32_t tags[16] = {};
  tags[0] = 7;
  tags[5] = 7;
  tags[15] = 7;
  tags[6] = 8;
  EXPECT_EQ(arch::match_16_tags(tags, 7), (1u << 0) | (1u << 5) | (1u << 15));
  EXPECT_EQ(arch::match_16_tags(tags, 8), 1u << 6);
  EXPECT_EQ(arch::match_16_tags(tags, 9), 0u);
}

}  // namespace
}  // namespace cdsa
