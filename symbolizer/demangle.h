// cdsa symbolizer: C++ symbol demangling.
//
// Contract: thread-safe and reentrant; allocates (returns std::string; the
// demangler mallocs internally); never throws. Call from the report path or
// the CLI, not from the launch hot path.
#pragma once

#include <string>

namespace cdsa::symbolizer {

// Demangles an Itanium C++ ABI name ("_ZN2at6native3fooEi" ->
// "at::native::foo(int)"). Names that are not mangled or fail to demangle are
// returned unchanged; nullptr gives "".
std::string demangle(const char* name);

}  // namespace cdsa::symbolizer
