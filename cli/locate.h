// Where `cdsa run` and `cdsa doctor` look for what the CLI ships beside it.
#pragma once

#include <string>

namespace cdsa::cli {

// The directory of this executable (/proc/self/exe), or "." when it cannot be read.
std::string self_dir();
// A regular file (after symbolic links).
bool is_file(const std::string& path);
// libcdsa.so next to this binary (../lib/, ../lib/cdsa/, beside it: the first found, as a real path), or "".
std::string find_libcdsa();

}  // namespace cdsa::cli
