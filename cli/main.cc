// cdsa: the command-line front end. One command per file (cli/<name>_command.cc), listed
// once in kCommands below, which also gives `cdsa --help` its synopsis lines.
//
//   cdsa run [options] -- CMD...   run CMD with libcdsa.so preloaded (cli/run_command.cc)
//   cdsa report|export|merge|flame|top ...   read trace files
//   cdsa doctor, cdsa jupyter install|uninstall   the setup (cli/doctor_command.cc, cli/jupyter_command.cc)
//   cdsa --help | --version
#include <fmt/format.h>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/version.h"
#include "cli/commands.h"
#include "shim/common/config.h"
#include "symbolizer/native_symbolizer.h"

namespace cdsa::cli {
namespace {

struct Command {
  const char* name;
  const char* synopsis;  // the arguments, for `cdsa --help`
  const char* summary;   // "" for run, whose options follow the synopsis lines
  int (*run)(int argc, char** argv);
};

// tools/demo.sh's CLI (CDSA_DEMO, cli/CMakeLists.txt) has only run and report; the others are named, and say where
// the full build is.
#if CDSA_DEMO_CLI
#define CDSA_NOT_IN_DEMO(command) nullptr
#else
#define CDSA_NOT_IN_DEMO(command) command
#endif

// A new command: one line here, its declaration in cli/commands.h, its file in cli/CMakeLists.txt.
const Command kCommands[] = {
    {"run", "[options] -- CMD [ARGS...]", "", cmd_run},
    {"report", "FILE [--json] [--no-resymbolize] [--native-all]", "the fault report again, from a trace file",
     cmd_report},
    {"export", "--chrome FILE... [-o OUT]", "launches as a Chrome/Perfetto timeline", CDSA_NOT_IN_DEMO(cmd_export)},
    {"merge", "[--session ID] DIR|FILES...", "multi-rank: whose evidence shows the first fault",
     CDSA_NOT_IN_DEMO(cmd_merge)},
    {"flame", "FILE [--python-only]", "launch-site profile as folded stacks", CDSA_NOT_IN_DEMO(cmd_flame)},
    {"top", "FILE [-n N]", "the busiest launch sites", CDSA_NOT_IN_DEMO(cmd_top)},
    {"doctor", "[--python PATH]", "will cdsa work here? (exit 0 yes, 1 no)", CDSA_NOT_IN_DEMO(doctor_command)},
    {"jupyter", "install|uninstall ...", "a Jupyter kernelspec that runs under cdsa", CDSA_NOT_IN_DEMO(cmd_jupyter)},
};

}  // namespace

std::string usage_text() {
  std::string out;
  for (const auto& c : kCommands) {
    std::string line = fmt::format("{} cdsa {} {}", out.empty() ? "usage:" : "      ", c.name, c.synopsis);
    out += *c.summary ? fmt::format("{:<43} {}\n", line, c.summary) : line + "\n";
  }
  out += fmt::format("{:<43} {}\n", "       cdsa --help | --version", "(COMMAND --help for each)");
  out +=
      "\n"
      "Names the kernel launch (Python line, native frames) behind an asynchronous CUDA fault,\n"
      "in the same run. `run` starts CMD with libcdsa.so preloaded and exits with CMD's status.\n"
      "\n";
  return out + run_options_help();
}

int main_entry(int argc, char** argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(usage_text().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("cdsa %s\n", CDSA_VERSION);
    return 0;
  }
  // The symbolizer's libdw comes from the same CDSA_* table as the preloaded library's. `cdsa run` and
  // `cdsa doctor` show the table's problems themselves; the other commands print them here, once.
  load_config();
  if (strcmp(argv[1], "run") != 0 && strcmp(argv[1], "doctor") != 0) report_config_problems_once();
  symbolizer::set_libdw_choice(config().libdw_path, config().no_libdw);
  for (const auto& c : kCommands) {
    if (strcmp(argv[1], c.name) != 0) continue;
    if (!c.run) {
      fprintf(stderr,
              "cdsa %s: not in this build: tools/demo.sh's CLI has only `cdsa run` and `cdsa report`; the full "
              "build's build/bin/cdsa has every command (README: The two commands)\n",
              c.name);
      return 2;
    }
    return c.run(argc - 2, argv + 2);
  }
  fprintf(stderr, "cdsa: unknown command '%s' (see cdsa --help)\n", argv[1]);
  return 2;
}

}  // namespace cdsa::cli

int main(int argc, char** argv) { return cdsa::cli::main_entry(argc, argv); }
