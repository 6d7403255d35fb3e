#include "cupti_tracer/discovery.h"

#include <glob.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

#include "base/path.h"

namespace cdsa::cupti {
namespace {

const char* const kNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
const char* const kCudaLibPrefixes[] = {"libcudart.so", "libtorch", "libc10_cuda",  "libcublas",
                                        "libnvrtc",     "libcudnn", "libnvJitLink", "libcupti"};

bool is_dir(const std::string& p) {
  struct stat st;
  return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

using base::basename_of;
using base::dirname_of;

bool is_cuda_library(const std::string& path) {
  std::string b = basename_of(path);
  for (const char* pre : kCudaLibPrefixes)
    if (b.compare(0, strlen(pre), pre) == 0) return true;
  return false;
}

struct DirList {
  std::vector<std::string> dirs;
  void add(const std::string& d) {
    if (!is_dir(d)) return;
    for (const auto& x : dirs)
      if (x == d) return;
    dirs.push_back(d);
  }
  // The wheel layouts under a folder that may hold nvidia/.
  void add_wheels(const std::string& root) {
    if (!is_dir(root + "/nvidia")) return;
    add(root + "/nvidia/cu13/lib");
    add(root + "/nvidia/cuda_cupti/lib");
  }
};

void add_globbed(std::vector<std::string>* out, const std::string& pattern) {
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out->push_back(g.gl_pathv[i]);
  globfree(&g);
}

int collect_loaded(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_name && info->dlpi_name[0] == '/')
    static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
  return 0;
}

}  // namespace

std::vector<std::string> cupti_search_dirs(const SearchInputs& in) {
  DirList l;
  for (const auto& lib : in.loaded) {
    if (!is_cuda_library(lib)) continue;
    std::string d = dirname_of(lib);
    l.add(d);
    for (int up = 0; up < 4 && d != "/" && d != "."; ++up) {
      l.add_wheels(d);
      d = dirname_of(d);
    }
  }
  for (const auto& p : in.python_dirs) {
    l.add_wheels(p);
    // A folder that is itself a lib dir (conda's $CONDA_PREFIX/lib) may hold libcupti directly.
    for (const char* n : kNames)
      if (is_file(p + "/" + n)) {
        l.add(p);
        break;
      }
  }
  std::string home = in.cuda_home.empty() ? in.default_toolkit : in.cuda_home;
  if (!home.empty()) {
    l.add(home + "/lib64");
    l.add(home + "/lib");
    l.add(home + "/extras/CUPTI/lib64");
    l.add(home + "/targets/" + in.arch + "/lib");
  }
  return l.dirs;
}

std::vector<std::string> cupti_candidates(const SearchInputs& in) {
  std::vector<std::string> out;
  for (const auto& d : cupti_search_dirs(in))
    for (const char* n : kNames) {
      std::string p = d + "/" + n;
      if (is_file(p)) out.push_back(p);
    }
  if (in.cuda_home.empty()) {
    out.push_back("libcupti.so.13");
    out.push_back("libcupti.so.12");
  }
  return out;
}

SearchInputs current_search_inputs() {
  SearchInputs in;
  dl_iterate_phdr(collect_loaded, &in.loaded);
  if (const char* pp = getenv("PYTHONPATH")) {
    std::string s = pp;
    size_t b = 0;
    while (b <= s.size()) {
      size_t e = s.find(':', b);
      if (e == std::string::npos) e = s.size();
      if (e > b) in.python_dirs.push_back(s.substr(b, e - b));
      b = e + 1;
    }
  }
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* v = getenv(var);
    if (!v || !*v) continue;
    add_globbed(&in.python_dirs, std::string(v) + "/lib/python3*/site-packages");
    if (!strcmp(var, "CONDA_PREFIX")) in.python_dirs.push_back(std::string(v) + "/lib");
  }
  const char* home = getenv("CUDA_HOME");
  if (!home || !*home) home = getenv("CUDA_PATH");
  if (home && *home) in.cuda_home = home;
  return in;
}

std::string join_dirs(const std::vector<std::string>& dirs, size_t max_chars) {
  std::string s;
  for (const auto& d : dirs) {
    if (!s.empty()) s += ", ";
    if (s.size() + d.size() > max_chars) {
      s += "...";
      break;
    }
    s += d;
  }
  return s.empty() ? std::string("(no candidate folder exists)") : s;
}

}  // namespace cdsa::cupti
