// Path helpers shared by the preload library, the CLI and the tests (header-only: nothing to link).
#pragma once

#include <string>
#include <string_view>

namespace cdsa::base {

// The part after the last '/': "/usr/lib/libcuda.so.1" -> "libcuda.so.1"; a path without '/' is its own basename.
inline std::string basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// The part before the last '/': "." for a path without '/', "/" for a file in the root.
inline std::string dirname_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  return slash == 0 ? "/" : std::string(path.substr(0, slash));
}

}  // namespace cdsa::base
