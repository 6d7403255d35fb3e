// libcdsa.so's constructor: read the configuration (and tell the symbolizer which
// libdw it names), find libc's own dlsym and the next definitions of what cdsa
// interposes, stand aside if another copy of libcdsa.so came first, and nothing
// else. No CUDA call, no thread, no file until the process itself uses CUDA (the
// first wrapped driver call starts cdsa: see lifecycle.h).
#include <dlfcn.h>

#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/intercept/interpose.h"
#include "shim/intercept/launcher_summary.h"
#include "shim/intercept/libc_hooks.h"
#include "shim/stacks/native_stack.h"
#include "symbolizer/native_symbolizer.h"

#include "base/export.h"

// One per copy of libcdsa.so: the first copy in the global scope is the one that records (see cdsa_load).
extern "C" CDSA_EXPORT void cdsa_library_copy() {}
// This copy's own address of it (the exported name, taken here, would go through the GOT to the first copy's).
extern "C" [[gnu::visibility("hidden")]] void cdsa_this_library_copy() __attribute__((alias("cdsa_library_copy")));

// The dl family (shim/intercept/libc_hooks.def's CDSA_DL_HOOK rows: dlsym, dlvsym, dlclose) is exported as
// NAME@@GLIBC_2.34 by the version script (shim/exports.map.in) and here as NAME@<base version> too (x86-64:
// GLIBC_2.2.5), as libc exports them: a lookup by either version finds cdsa's.
// Each entry is a jump to the hook itself (its hidden alias): a jump keeps the caller's return address, which
// dlsym's RTLD_NEXT and RTLD_DEFAULT answers depend on. Only in libcdsa.so: a version needs its version node.
#ifdef CDSA_GLIBC_BASE_VERSION
#if defined(__x86_64__)
#define CDSA_JUMP "jmp "
#elif defined(__aarch64__)
#define CDSA_JUMP "b "
#endif
#define CDSA_BASE_VERSION_ENTRY(name)                                                   \
  __asm__(".text\n.globl cdsa_" #name "_base\n.type cdsa_" #name "_base, %function\n" \
          "cdsa_" #name "_base:\n\t" CDSA_JUMP "cdsa_" #name "_local\n"               \
          ".size cdsa_" #name "_base, .-cdsa_" #name "_base\n"                         \
          ".symver cdsa_" #name "_base, " #name "@" CDSA_GLIBC_BASE_VERSION "\n");
#define CDSA_LIBC_HOOK(name, node, type)
#define CDSA_LIBC_HOOK_VIA(name, node, type, via)
#define CDSA_DL_HOOK(name, type) CDSA_BASE_VERSION_ENTRY(name)
#include "shim/intercept/libc_hooks.def"
#undef CDSA_LIBC_HOOK
#undef CDSA_LIBC_HOOK_VIA
#undef CDSA_DL_HOOK
#undef CDSA_BASE_VERSION_ENTRY
#endif

namespace {

__attribute__((constructor(101))) void cdsa_load() {
  cdsa::load_config();
  cdsa::symbolizer::set_libdw_choice(cdsa::config().libdw_path, cdsa::config().no_libdw);
  cdsa::real_dlsym();
  cdsa::real_dlvsym();
  // Preloaded twice from two files, or preloaded and dlopen'ed from another path: the copy the global scope finds
  // first records (for a copy dlopen'ed RTLD_LOCAL alone, RTLD_DEFAULT ends in its own group: itself).
  void* first = cdsa::real_dlsym()(RTLD_DEFAULT, "cdsa_library_copy");
  const bool standing_aside = first && first != reinterpret_cast<void*>(&cdsa_this_library_copy);
  if (standing_aside) cdsa::stand_aside_for_another_copy();
  else cdsa::launcher_session_init();  // the first process of a tree is its root (one copy: one summary)
  cdsa::next_dlsym();
  cdsa::next_dlvsym();
  cdsa::prepare_libc_hooks();
  cdsa::self_range_init();
  cdsa::interpose_init();
}

}  // namespace
