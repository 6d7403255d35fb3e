// The one option parser every `cdsa` command uses.
//
// Contract: walks argv in order; `--help`/`-h` print the command's help on stdout (exit
// status 0); an option that needs a value and lacks one (or whose `set` refuses it) gets
// "cdsa CMD: OPT needs WHAT" (2); an unknown option "cdsa CMD: unknown option OPT" (2);
// anything else goes to `positional`, which prints its own message when it refuses.
//
// Example:
//   bool json = false;
//   std::string path;
//   CommandLine cl{"report", help, {{"--json", false, store(json, true)}}, keep_last(path)};
//   if (int rc = parse_command_line(cl, argc, argv); rc != kGoOn) return rc;
//   // `cdsa report t.json --json`: json == true, path == "t.json"; `--bogus`: message, rc 2
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cdsa::cli {

// What `positional` returns to go on (anything else is the exit status).
constexpr int kGoOn = -1;

struct Option {
  std::string names;                           // "-o|--output"
  bool takes_value;                            // false: a flag
  std::function<bool(const char* value)> set;  // gets the value (nullptr for a flag); false: refused
  std::string needs = "a value";               // "cdsa export: -o needs a file name"
};

struct CommandLine {
  std::string command;  // "report": messages start "cdsa report: "
  std::string help;     // printed for --help / -h
  std::vector<Option> options{};
  std::function<int(const char* arg)> positional{};  // kGoOn, else the exit status (its message printed)
  // `cdsa run`: "--" or the first argument that is not an option starts the command to run.
  bool command_follows = false;
  // `cdsa merge`: every argument but --help is a file or directory name.
  bool all_positional = false;
  std::string unknown_hint{};  // appended to "unknown option X", e.g. " (see cdsa run --help)"
};

// A `set` for a flag: stores `value` in `target`.
inline std::function<bool(const char*)> store(bool& target, bool value) {
  return [&target, value](const char*) {
    target = value;
    return true;
  };
}

// A `set` for a value: stores it in `target`; an empty value is refused unless `empty_ok`.
inline std::function<bool(const char*)> store_text(std::string& target, bool empty_ok = false) {
  return [&target, empty_ok](const char* v) {
    if (!*v && !empty_ok) return false;
    target = v;
    return true;
  };
}
// A `positional` that keeps the last argument in `target`.
inline std::function<int(const char*)> keep_last(std::string& target) {
  return [&target](const char* arg) {
    target = arg;
    return kGoOn;
  };
}

// Returns kGoOn when the command should go on (`*next`, if given, is the index of the first
// argument not consumed: the command to run), else the exit status to return.
int parse_command_line(const CommandLine& cl, int argc, char** argv, int* next = nullptr);

// For a command whose operands are missing: prints the first line of `cl.help` (its "usage: ..." line) on stderr
// and returns the exit status 2.
int usage_error(const CommandLine& cl);

}  // namespace cdsa::cli
