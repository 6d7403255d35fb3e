// libcdsa.so's constructor: read the configuration (and tell the symbolizer which
// libdw it names), find libc's own dlsym, and nothing else. No CUDA call, no thread, no file until the process itself
// uses CUDA (the first wrapped driver call starts cdsa: see lifecycle.h).
#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/intercept/interpose.h"
#include "shim/record/native_stack.h"
#include "symbolizer/native_symbolizer.h"

namespace {

__attribute__((constructor(101))) void cdsa_load() {
  cdsa::load_config();
  cdsa::symbolizer::set_libdw_choice(cdsa::config().libdw_path, cdsa::config().no_libdw);
  cdsa::real_dlsym();
  cdsa::real_dlvsym();
  cdsa::self_range_init();
  cdsa::interpose_init();
}

}  // namespace
