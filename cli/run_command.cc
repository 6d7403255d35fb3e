// cdsa run [options] -- CMD [ARGS...]: run CMD with libcdsa.so preloaded; exits with CMD's status.
//
// `run` finds libcdsa.so next to the cdsa binary (../lib/libcdsa.so, as the build and an
// install lay them out) unless --lib says otherwise, adds it to LD_PRELOAD (keeping what is
// there), turns options into CDSA_* variables (the options come from shim/common/config_vars.def),
// reports the configuration problems of the environment it passes on, then execs CMD.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/path.h"
#include "cli/commands.h"
#include "cli/locate.h"
#include "cli/options.h"
#include "shim/common/config.h"

extern char** environ;

namespace cdsa::cli {
namespace {

// LD_PRELOAD with `lib` added: after a sanitizer runtime (which must stay first or it refuses to start), before
// everything else.
std::string preload_with(const std::string& lib) {
  const char* old = getenv("LD_PRELOAD");
  std::string first, rest;
  for (const char* p = old ? old : ""; *p;) {
    size_t n = strcspn(p, ": ");
    std::string entry(p, n);
    p += n;
    if (*p) ++p;
    if (entry.empty()) continue;
    std::string base = base::basename_of(entry);
    bool sanitizer = base.rfind("libasan", 0) == 0 || base.rfind("libtsan", 0) == 0 ||
                     base.rfind("libclang_rt.", 0) == 0 || base.rfind("libubsan", 0) == 0;
    std::string& to = sanitizer ? first : rest;
    to += (to.empty() ? "" : ":") + entry;
  }
  std::string preload = first.empty() ? lib : first + ":" + lib;
  if (!rest.empty()) preload += ":" + rest;
  return preload;
}

}  // namespace

std::string run_options_help() {
  std::string out =
      "run options (each sets the CDSA_* variable it names):\n"
      "  --lib PATH            libcdsa.so to preload (default: next to this binary, ../lib/libcdsa.so)\n";
  const auto vars = config_vars();
  for (const auto& v : vars) {
    if (v.run_option.empty()) continue;
    std::string option = v.run_meta.empty() ? v.run_option : v.run_option + " " + v.run_meta;
    std::string sets = v.run_meta.empty() ? v.name + "=" + v.run_value : v.name + "=" + v.run_meta;
    out += fmt::format("  {:<20}  {}\n", option, sets);
  }
  out += "\nEnvironment variables read by libcdsa.so:\n";
  for (const auto& v : vars) out += fmt::format("  {:<20} {}\n", v.name, v.help);
  return out;
}

namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;

// `cdsa run`'s options: --lib into `lib`, each CDSA_* one into `vars`; the command follows them.
CommandLine run_command_line(const std::string& command, std::string& lib, Vars& vars) {
  CommandLine cl{command, usage_text()};
  cl.command_follows = true;
  cl.unknown_hint = " (see cdsa run --help)";
  cl.options.push_back({"--lib", true, [&lib](const char* v) {
                          lib = v;
                          return true;
                        }});
  for (const auto& v : config_vars()) {
    if (v.run_option.empty()) continue;
    std::string name = v.name, fixed = v.run_value;
    cl.options.push_back({v.run_option, !v.run_meta.empty(), [&vars, name, fixed](const char* value) {
                            vars.emplace_back(name, value ? value : fixed);
                            return true;
                          }});
  }
  return cl;
}

}  // namespace

bool valid_run_options(const std::string& command, const std::vector<std::string>& options) {
  std::string lib;
  Vars vars;
  CommandLine cl = run_command_line(command, lib, vars);
  std::vector<std::string> copy = options;
  std::vector<char*> argv;
  for (auto& o : copy) {
    if (o == "--help" || o == "-h" || o == "--") {
      fprintf(stderr, "cdsa %s: %s is not a cdsa run option to pass on\n", command.c_str(), o.c_str());
      return false;
    }
    argv.push_back(o.data());
  }
  int next = 0;
  if (parse_command_line(cl, static_cast<int>(argv.size()), argv.data(), &next) != kGoOn) return false;
  if (next < static_cast<int>(argv.size())) {
    fprintf(stderr, "cdsa %s: %s is not a cdsa run option (see cdsa run --help)\n", command.c_str(), argv[next]);
    return false;
  }
  if (!lib.empty() && !is_file(lib)) {
    fprintf(stderr, "cdsa %s: --lib %s: no such file\n", command.c_str(), lib.c_str());
    return false;
  }
  return true;
}

int cmd_run(int argc, char** argv) {
  std::string lib;
  Vars vars;
  CommandLine cl = run_command_line("run", lib, vars);
  int i = 0;
  if (int rc = parse_command_line(cl, argc, argv, &i); rc != kGoOn) return rc;
  if (i >= argc) {
    fprintf(stderr, "cdsa run: no command given (usage: cdsa run [options] -- CMD [ARGS...])\n");
    return 2;
  }
  if (lib.empty()) {
    lib = find_libcdsa();
    if (lib.empty()) {
      fprintf(stderr, "cdsa run: libcdsa.so not found next to %s; pass --lib PATH\n", self_dir().c_str());
      return 2;
    }
  } else if (!is_file(lib)) {
    fprintf(stderr, "cdsa run: --lib %s: no such file\n", lib.c_str());
    return 2;
  }
  setenv("LD_PRELOAD", preload_with(lib).c_str(), 1);
  for (auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  // The command's processes say nothing about their configuration until one uses CUDA: say it here, once, first.
  for (const auto& problem : config_problems(environ)) fprintf(stderr, "cdsa run: %s\n", problem.c_str());

  // Become the command: its pid, signals, job control and exit status are the command's own.
  execvp(argv[i], argv + i);
  fprintf(stderr, "cdsa run: cannot run %s: %s\n", argv[i], strerror(errno));
  return 127;
}

}  // namespace cdsa::cli
