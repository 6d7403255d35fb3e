#include "symbolizer/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

namespace cdsa::symbolizer {

std::string demangle(const char* name) {
  if (name == nullptr) return {};
  // Only Itanium-mangled names ("_Z..."; also "__Z..." on some platforms).
  const char* p = name;
  if (std::strncmp(p, "__Z", 3) == 0) ++p;
  if (std::strncmp(p, "_Z", 2) != 0) return name;
  int status = 0;
  char* out = abi::__cxa_demangle(p, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) {
    std::free(out);
    return name;
  }
  std::string result(out);
  std::free(out);
  return result;
}

}  // namespace cdsa::symbolizer
