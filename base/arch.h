// Everything cdsa does differently on x86-64 and on aarch64 (Grace hosts), in one place: the registers a capture
// reads from a ucontext_t, libunwind's names and register numbers, code addresses as the unwinder hands them out
// (pointer-authentication bits, unw_backtrace's adjusted return addresses), the cycle counter behind the launch
// clock, a spin-wait hint, the compare of a cache set's 16 tags, and the architecture's name. Every other file
// includes this one instead of testing __x86_64__ or __aarch64__ itself, so an architecture is one section here.
// Contract: header-only, no state; every function is async-signal-safe, allocates nothing and is inline.
//
// Example (the native stack's capture point):
//   ucontext_t uc;
//   walker.getcontext(&uc);
//   const uintptr_t sp0 = cdsa::arch::sp_of(uc);
#pragma once

#include <elf.h>
#include <ucontext.h>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#include <x86intrin.h>
#elif defined(__aarch64__)
#else
#error "cdsa is built for x86-64 and aarch64 only: base/arch.h has no section for this architecture"
#endif

namespace cdsa::arch {

#if defined(__x86_64__)

// The name `cdsa doctor` prints, as uname -m spells it; the ELF machine of this architecture's shared objects
// (`cdsa doctor` checks libcdsa.so and libcupti against it); the CUDA toolkit's folder of its libraries
// (targets/<name>/lib, where CUPTI is searched).
constexpr const char* kName = "x86_64";
constexpr uint16_t kElfMachine = EM_X86_64;
constexpr const char* kCudaTargetName = "x86_64-linux";

// ---- registers of a captured context ----
inline uintptr_t pc_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.gregs[REG_RIP]); }
inline uintptr_t sp_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.gregs[REG_RSP]); }
inline uintptr_t fp_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.gregs[REG_RBP]); }

// ---- libunwind (loaded with dlopen, named by these strings; the register numbers are DWARF's) ----
#define CDSA_UNW_LOCAL(name) "_ULx86_64_" name
#define CDSA_UNW_GENERIC(name) "_Ux86_64_" name
// libunwind's getcontext is an exported function on x86-64 (_Ux86_64_getcontext): cdsa_capture_context (below,
// aarch64's) is neither needed nor defined here.
constexpr bool kUnwGetcontextExported = true;
constexpr int kUnwFp = 6, kUnwSp = 7, kUnwPc = 16;
// The register whose save location is the slot a frame's return address was read from: x86-64 has no link
// register, the return address column is RIP itself.
constexpr int kUnwReturnSlot = 16;
// unw_cursor_t is UNW_TDEP_CURSOR_LEN (127 in libunwind 1.6) words on x86-64; cdsa's buffer has room to spare.
constexpr int kUnwCursorWords = 140;

// Whether the frame that was just stepped out of may have found its CFA from the frame pointer, given the
// caller's SP (that frame's CFA) and the frame pointer it had. x86-64's frame-pointer prologue (push %rbp;
// mov %rsp,%rbp) makes CFA == RBP + 16: the saved RBP and the return address sit between them. A frame whose CFA
// came from RSP and matches by coincidence only adds one check to the cache entry, never a wrong hit.
inline bool cfa_may_use_fp(uint64_t caller_sp, uint64_t fp) { return caller_sp == fp + 16; }

// GCC's stack-realigning prologue (DRAP) at the start of a function: `lea disp8(%rsp),%rXX` then
// `and $imm,%rsp`. Its CFA is loaded from the stack by a DWARF expression, which the cache's checks do not cover.
inline bool realigns_stack(uintptr_t start, uintptr_t end) {
  if (!start || end <= start) return false;
  const auto* b = reinterpret_cast<const unsigned char*>(start);
  const size_t n = end - start < 32 ? end - start : 32;
  bool lea = false;
  for (size_t i = 0; i + 4 < n; ++i) {
    if ((b[i] == 0x48 || b[i] == 0x4c) && b[i + 1] == 0x8d && (b[i + 2] & 0xc7) == 0x44 && b[i + 3] == 0x24) lea = true;
    if (lea && b[i] == 0x48 && b[i + 1] == 0x83 && b[i + 2] == 0xe4) return true;
  }
  return false;
}

// ---- code addresses ----
// x86-64 return addresses carry no signature: unchanged.
inline uintptr_t strip_code_address(uintptr_t a) { return a; }
// unw_backtrace on x86-64 returns return addresses as they are.
inline uintptr_t backtrace_pc(uintptr_t a) { return a; }

// ---- the launch clock's counter ----
// The time stamp counter; where it may be used is launch_clock.cc's question (invariant TSC, "tsc" the kernel's
// clocksource). The name launch_clock_name() gives for it.
constexpr const char* kCounterName = "tsc";
constexpr const char* kCounterClocksource = "tsc";
inline uint64_t read_counter() { return __rdtsc(); }

// A spin-wait hint (PAUSE).
inline void cpu_relax() { _mm_pause(); }

// The ways among 16 consecutive 32-bit tags (16-byte aligned) that equal `tag`, as a bit mask: one SSE compare per
// four tags.
inline uint32_t match_16_tags(const uint32_t* tags, uint32_t tag) {
  const __m128i t = _mm_set1_epi32(static_cast<int>(tag));
  uint32_t m = 0;
  for (int q = 0; q < 4; ++q) {
    const __m128i w = _mm_load_si128(reinterpret_cast<const __m128i*>(tags + 4 * q));
    m |= static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(w, t)))) << (4 * q);
  }
  return m;
}

#elif defined(__aarch64__)

constexpr const char* kName = "aarch64";
constexpr uint16_t kElfMachine = EM_AARCH64;
// NVIDIA's name for 64-bit Arm servers (Grace): targets/sbsa-linux.
constexpr const char* kCudaTargetName = "sbsa-linux";

// ---- registers of a captured context ----
// mcontext_t holds x0..x30 in regs[], then sp and pc. regs[29] is the frame pointer (AAPCS64: x29 points at the
// frame record {caller's x29, return address}), regs[30] the link register: the return address of a frame that has
// not saved it yet (a leaf, or a function before its prologue's store).
inline uintptr_t pc_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.pc); }
inline uintptr_t sp_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.sp); }
inline uintptr_t fp_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.regs[29]); }
inline uintptr_t lr_of(const ucontext_t& uc) { return static_cast<uintptr_t>(uc.uc_mcontext.regs[30]); }

// ---- libunwind ----
#define CDSA_UNW_LOCAL(name) "_ULaarch64_" name
#define CDSA_UNW_GENERIC(name) "_Uaarch64_" name
// On aarch64 libunwind's getcontext is a macro of inline assembly (unw_tdep_getcontext in libunwind-aarch64.h),
// not an exported function: cdsa_capture_context is cdsa's equivalent.
constexpr bool kUnwGetcontextExported = false;
// UNW_AARCH64_X29, UNW_AARCH64_SP, and for the PC UNW_REG_IP, which is UNW_AARCH64_X30 there: unw_get_reg answers
// it from the cursor's IP of each frame. UNW_AARCH64_PC (32) is not that: libunwind 1.6 reads it from its save
// location, which no step updates, so every frame would read the capture point's PC.
constexpr int kUnwFp = 29, kUnwSp = 31, kUnwPc = 30;
// The return address column is x30 (UNW_TDEP_IP is UNW_AARCH64_X30): after a step, the caller's x30 was restored
// from the slot its callee saved it in, and that value is the caller's PC.
constexpr int kUnwReturnSlot = 30;
// unw_cursor_t is UNW_TDEP_CURSOR_LEN (250 in libunwind 1.6) words on aarch64.
constexpr int kUnwCursorWords = 264;

// AArch64 has no single prologue shape: GCC sets x29 to the frame record at the bottom of a frame of any size
// (CFA == x29 + frame size), clang to a record at the top (CFA == x29 + 16). So every frame is taken as possibly
// x29-based: each saved x29 slot becomes a check of its own. Extra checks make a hit rarer, never wrong.
inline bool cfa_may_use_fp(uint64_t, uint64_t) { return true; }

// AArch64's SP is kept 16-byte aligned by the ABI: a function that needs more alignment addresses its locals from
// a realigned x29 or another register, and its CFA stays SP- or x29-based in its CFI (no DWARF expression that
// loads it from the stack, as x86-64's DRAP does). Nothing to detect.
inline bool realigns_stack(uintptr_t, uintptr_t) { return false; }

// ---- code addresses ----
// A return address signed with pointer authentication (-mbranch-protection=pac-ret: paciasp in the prologue)
// carries its signature in the bits above the virtual address. XPACLRI clears them from x30; it is in the HINT
// space, so a CPU without pointer authentication executes it as a NOP (and signs nothing). Then the bits above
// Linux's 48-bit user address space are masked too: a tag in the top byte (TBI) is not part of the address, and
// ld.so maps code below 2^48 (a 52-bit address needs an explicit mmap hint, which no loader gives).
inline uintptr_t strip_code_address(uintptr_t a) {
  register uintptr_t x30 __asm__("x30") = a;
  __asm__("hint #7" : "+r"(x30));  // xpaclri
  return x30 & ((uintptr_t{1} << 48) - 1);
}
// libunwind 1.6's unw_backtrace on aarch64 gives each caller's return address minus 1 (its fast trace points into
// the call instruction). AArch64 instructions are 4 bytes and 4-aligned, so a return address never has its low
// two bits set: such an address is rounded back up, giving the same values as the step-by-step walk.
inline uintptr_t backtrace_pc(uintptr_t a) {
  a = strip_code_address(a);
  return (a & 3) != 0 ? (a | 3) + 1 : a;
}

// The registers libunwind's init_local reads (x19..x30, sp, pc; x0..x18 too, as unw_tdep_getcontext stores them),
// stored into `uc` the way unw_tdep_getcontext does. pc is the function's return address, sp the caller's SP: the
// context is the caller's, at the instruction after the call, as x86-64's _Ux86_64_getcontext gives it. Unlike
// glibc's getcontext it makes no rt_sigprocmask system call, which would be one per launch. Returns 0. Defined
// once, by CDSA_ARCH_DEFINE_CAPTURE_CONTEXT in shim/stacks/native_unwinder.cc (assembly: a C++ function could not
// promise which registers it has already changed). Declared for both architectures, below.
// uc_mcontext.regs lies 184 bytes into glibc's aarch64 ucontext_t: uc_flags, uc_link (8 each), uc_stack (24),
// uc_sigmask (128) make 168, mcontext_t is 16-aligned (176) and starts with fault_address (8). sp and pc follow
// regs[30] (at 184 + 248 and 184 + 256).
constexpr size_t kUcRegsOffset = 184;
#define CDSA_ARCH_DEFINE_CAPTURE_CONTEXT()                                                          \
  static_assert(__builtin_offsetof(ucontext_t, uc_mcontext.regs) == cdsa::arch::kUcRegsOffset);     \
  static_assert(__builtin_offsetof(ucontext_t, uc_mcontext.sp) == cdsa::arch::kUcRegsOffset + 248); \
  static_assert(__builtin_offsetof(ucontext_t, uc_mcontext.pc) == cdsa::arch::kUcRegsOffset + 256); \
  __asm__(                                                                                          \
      ".pushsection .text.cdsa_capture_context,\"ax\",%progbits\n"                                  \
      ".globl cdsa_capture_context\n"                                                               \
      ".hidden cdsa_capture_context\n"                                                              \
      ".type cdsa_capture_context,%function\n"                                                      \
      ".balign 16\n"                                                                                \
      "cdsa_capture_context:\n"                                                                     \
      "hint 34\n" /* bti c: callable through a pointer where branch target identification is on */  \
      "stp x0, x1, [x0, #184]\n"                                                                    \
      "stp x2, x3, [x0, #200]\n"                                                                    \
      "stp x4, x5, [x0, #216]\n"                                                                    \
      "stp x6, x7, [x0, #232]\n"                                                                    \
      "stp x8, x9, [x0, #248]\n"                                                                    \
      "stp x10, x11, [x0, #264]\n"                                                                  \
      "stp x12, x13, [x0, #280]\n"                                                                  \
      "stp x14, x15, [x0, #296]\n"                                                                  \
      "stp x16, x17, [x0, #312]\n"                                                                  \
      "stp x18, x19, [x0, #328]\n"                                                                  \
      "stp x20, x21, [x0, #344]\n"                                                                  \
      "stp x22, x23, [x0, #360]\n"                                                                  \
      "stp x24, x25, [x0, #376]\n"                                                                  \
      "stp x26, x27, [x0, #392]\n"                                                                  \
      "stp x28, x29, [x0, #408]\n"                                                                  \
      "mov x1, sp\n"                                                                                \
      "stp x30, x1, [x0, #424]\n" /* regs[30], then sp */                                           \
      "str x30, [x0, #440]\n"     /* pc: the return address */                                      \
      "mov x0, #0\n"                                                                                \
      "ret\n"                                                                                       \
      ".size cdsa_capture_context, .-cdsa_capture_context\n"                                        \
      ".popsection\n")

// ---- the launch clock's counter ----
// The generic timer's virtual count (CNTVCT_EL0), which Linux lets user space read (its vDSO does) and keeps time
// by (clocksource "arch_sys_counter"). Its rate is CNTFRQ_EL0; launch_clock.cc calibrates against CLOCK_MONOTONIC
// as on x86-64 and need not read it. No ISB before the read: like RDTSC (not RDTSCP) it may be taken a few
// instructions early, which is far below what a launch's time stamp resolves.
constexpr const char* kCounterName = "cntvct";
constexpr const char* kCounterClocksource = "arch_sys_counter";
inline uint64_t read_counter() {
  uint64_t v;
  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
  return v;
}
inline uint64_t counter_frequency() {
  uint64_t v;
  __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(v));
  return v;
}

// A spin-wait hint (YIELD).
inline void cpu_relax() { __asm__ __volatile__("yield" ::: "memory"); }

// The ways among 16 consecutive 32-bit tags that equal `tag`, as a bit mask. A plain loop: GCC turns it into
// NEON compares.
inline uint32_t match_16_tags(const uint32_t* tags, uint32_t tag) {
  uint32_t m = 0;
  for (int i = 0; i < 16; ++i) m |= static_cast<uint32_t>(tags[i] == tag) << i;
  return m;
}

#endif

}  // namespace cdsa::arch

// aarch64's stand-in for libunwind's getcontext (above); declared everywhere so that a branch not taken on x86-64
// (kUnwGetcontextExported) may name it, defined only on aarch64.
extern "C" int cdsa_capture_context(ucontext_t* uc);
