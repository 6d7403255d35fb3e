// Running a helper program (a Python probe) from the CLI and reading what it printed.
#pragma once

#include <string>
#include <vector>

namespace cdsa::cli {

// Runs `args` (args[0] looked up on PATH), its stdout appended to *out (at most 1 MiB), stderr to *err when given
// (else inherited). Returns its exit status (128 + signal when killed), or -1 if it could not be started.
int capture(const std::vector<std::string>& args, std::string* out, std::string* err = nullptr);

// The value of the line "KEY=value" in `text`, or "".
std::string field(const std::string& text, const std::string& key);

}  // namespace cdsa::cli
