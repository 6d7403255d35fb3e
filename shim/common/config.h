// cdsa's configuration, read once from CDSA_* environment variables.
//
// Contract: every variable is one line of shim/common/config_vars.def, which generates the
// Config struct below, the parser, the trace's `config` object (`config_fields`) and
// the `cdsa run` options and help (`config_vars`).
// `load_config()` runs in the library constructor (single-threaded at that point);
// afterwards `config()` is read-only and safe from any thread. A bad value falls back to
// the default with one message naming it ("cdsa: CDSA_NATIVE_DEPTH=abc: expected an
// integer in 0..256; using the default"); an unknown CDSA_* name gets one message too.
// The messages are kept, not printed, at load: `report_config_problems_once()` prints
// them when the process first uses CUDA, so tools that never do (shells, compilers)
// keep their stderr. Under secure execution (setuid/setgid, AT_SECURE) the environment
// is ignored and no trace file is written.
//
// Example:
//   const char* env[] = {"CDSA_NATIVE_DEPTH=abc", "CDSA_QUIET=1", nullptr};
//   config_problems(env)   -> {"CDSA_NATIVE_DEPTH=abc: expected an integer in 0..256; using the default"}
//   parse_config(env, false, nullptr, nullptr).quiet  -> true
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cdsa {

enum class TraceMode { Off, OnFault, Always };
enum class Backend { Driver, Cupti };

// The fields, types and defaults come from shim/common/config_vars.def.
#define CDSA_FIELD_Int(field, def, hi) int field = def;
#define CDSA_FIELD_Pow2(field, def, hi) uint32_t field = def;
#define CDSA_FIELD_Count(field, def, hi) uint32_t field = def;
#define CDSA_FIELD_Flag(field, def, hi) bool field = def;
#define CDSA_FIELD_NotFlag(field, def, hi) bool field = def;
#define CDSA_FIELD_Choice(field, def, hi) decltype(def) field = def;
#define CDSA_FIELD_Text(field, def, hi) char field[(hi) + 1] = def;
struct Config {
#define CDSA_VAR(name, field, kind, def, lo, hi, run, key, help) CDSA_FIELD_##kind(field, def, hi)
#include "shim/common/config_vars.def"
#undef CDSA_VAR
  bool secure = false;  // AT_SECURE was set: environment ignored
};
#undef CDSA_FIELD_Int
#undef CDSA_FIELD_Pow2
#undef CDSA_FIELD_Count
#undef CDSA_FIELD_Flag
#undef CDSA_FIELD_NotFlag
#undef CDSA_FIELD_Choice
#undef CDSA_FIELD_Text

extern Config g_config;  // written by load_config (and the two setters below) only
inline const Config& config() noexcept { return g_config; }  // inline: the launch path reads it three times

// Reads `environ` (nothing under AT_SECURE) into config(); keeps the problems for
// report_config_problems_once(). No allocation.
void load_config() noexcept;

// The root of a launcher tree set CDSA_SESSION to `id` after load_config() read the environment
// (shim/intercept/launcher_summary.h): config().session says it too. Constructor only (single-threaded).
void begin_session(const char* id) noexcept;

// Another copy of libcdsa.so came first in this process (preloaded twice from two files, or preloaded and
// dlopen'ed from another path): this copy records nothing (config().enabled is false: every hook passes
// through), so one copy records and reports. Constructor only (single-threaded).
void stand_aside_for_another_copy() noexcept;

// Prints the problems load_config() found, each once per process, on the first call
// only. Thread-safe; called where the process first uses CUDA (the library's start-up).
void report_config_problems_once() noexcept;

// Parses a null-terminated NAME=VALUE array (only CDSA_* entries are looked at).
// `problem` gets one message per bad value or unknown name (no "cdsa: " prefix, no
// newline); it may be null. `secure`: ignore the environment, as under AT_SECURE.
using ConfigProblemFn = void (*)(void* ctx, const char* message) noexcept;
Config parse_config(const char* const* envp, bool secure, ConfigProblemFn problem, void* ctx) noexcept;

// The messages parse_config() gives for `envp`: what `cdsa run` and `cdsa doctor` show
// before they start anything.
std::vector<std::string> config_problems(const char* const* envp);

// The trace file's "config" object: (key, value text) for each variable with a trace key.
std::vector<std::pair<std::string, std::string>> config_fields(const Config& c);

// One variable as `cdsa run`, its --help and the README show it.
struct ConfigVar {
  std::string name;                  // CDSA_NATIVE_DEPTH
  std::string run_option;            // --native-depth (empty: none)
  std::string run_meta;              // N (empty: the option takes no value and sets `run_value`)
  std::string run_value;             // for an option without a value: what it sets the variable to
  std::string help;                  // one line, with the range and "(default ...)"
  std::string default_text;          // the default as the variable would spell it: 48, 1, fault
  std::string kind;                  // Int, Pow2, Count, Flag, NotFlag, Choice, Text (see shim/common/config_vars.def)
  long lo = 0, hi = 0;               // Int, Pow2, Count: the range; Text: the length range
  std::vector<std::string> choices;  // Choice: the accepted names (aliases included)
};
std::vector<ConfigVar> config_vars();

}  // namespace cdsa
