#include "cli/locate.h"

#include <sys/stat.h>
#include <unistd.h>
#include <climits>
#include <cstdlib>

#include "base/path.h"

namespace cdsa::cli {

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return base::dirname_of(buf);
}

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string find_libcdsa() {
  const std::string dir = self_dir();
  for (const char* rel : {"/../lib/libcdsa.so", "/../lib/cdsa/libcdsa.so", "/libcdsa.so"}) {
    std::string cand = dir + rel;
    if (is_file(cand)) {
      char real[PATH_MAX];
      return realpath(cand.c_str(), real) ? real : cand;
    }
  }
  return "";
}

}  // namespace cdsa::cli
