// Where libcupti is looked for, in order (the first that loads wins):
//   1. a copy already loaded in the process (dlopen RTLD_NOLOAD of libcupti.so.13,
//      .12, libcupti.so) — done by the loader in backend.cc, not listed here;
//   2. the pip wheel layouts `nvidia/cu13/lib` (CUDA 13) and `nvidia/cuda_cupti/lib`
//      (CUDA 12) under every directory that holds a `nvidia/` folder, found by
//      walking up (at most 4 levels) from each loaded CUDA library (libcudart,
//      libtorch*, libc10_cuda, libcublas*, libnvrtc*, libcudnn*, libnvJitLink,
//      libcupti) and also the directory of such a library itself; then the same
//      layouts under the site-packages folders that the environment names without
//      Python: PYTHONPATH entries, $VIRTUAL_ENV/lib/python3.*/site-packages,
//      $CONDA_PREFIX/lib/python3.*/site-packages and $CONDA_PREFIX/lib;
//   3. the toolkit: $CUDA_HOME (else $CUDA_PATH, else /usr/local/cuda) in lib64,
//      lib, extras/CUPTI/lib64, targets/<arch>-linux/lib;
//   4. only when neither CUDA_HOME nor CUDA_PATH is set: the dynamic loader's own
//      search by soname (LD_LIBRARY_PATH, ld.so.cache). Setting CUDA_HOME thus
//      pins the toolkit: a libcupti elsewhere on the system is not picked up.
// In each directory the names tried are libcupti.so.13, libcupti.so.12, libcupti.so.
//
// Contract: `cupti_search_dirs`/`cupti_candidates` are pure over their inputs
// apart from stat(2) calls (existence checks); they allocate (std::string) and
// run once, at backend start, off the launch path; no CUDA call. `current_search_inputs`
// reads the process (dl_iterate_phdr, getenv, glob): call it once (the backend does so under
// a once-flag), not while another thread may setenv.
#pragma once

#include <string>
#include <vector>

#include "base/arch.h"

namespace cdsa::cupti {

struct SearchInputs {
  std::vector<std::string> loaded;       // paths of the shared objects loaded in the process
  std::vector<std::string> python_dirs;  // site-packages-like folders named by the environment
  std::string cuda_home;                 // $CUDA_HOME or $CUDA_PATH; empty when neither is set
  std::string default_toolkit = "/usr/local/cuda";
  std::string arch = ::cdsa::arch::kCudaTargetName;  // targets/<arch>/lib: x86_64-linux, sbsa-linux (base/arch.h)
};

// The directories searched, in order, de-duplicated; only existing ones.
std::vector<std::string> cupti_search_dirs(const SearchInputs& in);

// Existing files to try, in order, then (when no toolkit is pinned, step 4) the
// bare sonames "libcupti.so.13", "libcupti.so.12" for the loader's own search.
std::vector<std::string> cupti_candidates(const SearchInputs& in);

// The inputs of this process.
SearchInputs current_search_inputs();

// "a, b, c" (for the one-line message when nothing was found).
std::string join_dirs(const std::vector<std::string>& dirs, size_t max_chars = 600);

}  // namespace cdsa::cupti
