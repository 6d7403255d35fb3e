// Itanium C++ ABI demangling, for the report path and the CLI (the symbolizer's frames, attribution's kernel
// names): "_ZN2at6native3fooEi" -> "at::native::foo(int)". Names that are not mangled or fail to demangle are
// returned unchanged; nullptr gives "".
//
// Contract: thread-safe and reentrant; allocates (returns std::string; the demangler mallocs internally); never
// throws. Not for the launch hot path.
#pragma once

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace cdsa::base {

inline std::string demangle(const char* name) {
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

}  // namespace cdsa::base
