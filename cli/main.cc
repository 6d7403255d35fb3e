// cdsa: the command-line front end.
//
//   cdsa run [options] -- CMD...   run CMD with libcdsa.so preloaded; exits with CMD's status
//   cdsa report|export|merge|flame|top ...   read trace files (cli/trace_commands.cc)
//   cdsa --help | --version
//
// `run` finds libcdsa.so next to the cdsa binary (../lib/libcdsa.so, as the
// build and an install lay them out) unless --lib says otherwise, adds it to
// LD_PRELOAD (keeping what is there) and turns options into CDSA_* variables.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "cli/commands.h"
#include "shim/config.h"

#ifndef CDSA_VERSION
#define CDSA_VERSION "0.0.0"
#endif

namespace cdsa::cli {
namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: cdsa run [options] -- CMD [ARGS...]\n"
          "       cdsa report FILE [--json]            the fault report again, from a trace file\n"
          "       cdsa export --chrome FILE... [-o OUT] launches as a Chrome/Perfetto timeline\n"
          "       cdsa merge DIR|FILES...              multi-rank: which rank faulted first\n"
          "       cdsa flame FILE [--python-only]      launch-site profile as folded stacks\n"
          "       cdsa top FILE [-n N]                 the busiest launch sites\n"
          "       cdsa doctor [--python PATH]          will cdsa work here? (exit 0 yes, 1 no)\n"
          "       cdsa --help | --version              (COMMAND --help for each)\n"
          "\n"
          "Names the kernel launch (Python line, native frames) behind an asynchronous CUDA fault,\n"
          "in the same run. `run` starts CMD with libcdsa.so preloaded and exits with CMD's status.\n"
          "\n"
          "run options (each sets the CDSA_* variable named after it):\n"
          "  --lib PATH            libcdsa.so to preload (default: next to this binary, ../lib/libcdsa.so)\n"
          "  --trace-file PATTERN  CDSA_TRACE_FILE: trace file name, %%h host, %%p pid, %%r rank, %%t time\n"
          "  --trace MODE          CDSA_TRACE: fault (default), always, off\n"
          "  --native-depth N      CDSA_NATIVE_DEPTH: native frames per launch (default 48)\n"
          "  --python-depth N      CDSA_PYTHON_DEPTH: Python frames per launch (default 24)\n"
          "  --ring-size N         CDSA_RING_SIZE: launch records kept (default 65536)\n"
          "  --backend NAME        CDSA_BACKEND: driver (default) or cupti\n"
          "  --exit-probe-ms N     CDSA_EXIT_PROBE_MS: wait at exit for pending kernels (default 2000)\n"
          "  --no-breadcrumbs      CDSA_BREADCRUMBS=0\n"
          "  --quiet               CDSA_QUIET=1: no report on stderr, trace file only\n"
          "  --profile             CDSA_PROFILE=1: count launches per launch site, written at exit\n"
          "\n"
          "Environment variables read by libcdsa.so:\n");
  for (size_t i = 0; i < kConfigVarCount; ++i) fprintf(out, "  %-20s %s\n", kConfigVars[i].name, kConfigVars[i].help);
}

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int cmd_run(int argc, char** argv) {
  std::string lib;
  std::vector<std::pair<std::string, std::string>> vars;
  int i = 0;
  auto need_value = [&](const char* opt) -> const char* {
    if (i + 1 >= argc) {
      fprintf(stderr, "cdsa run: %s needs a value\n", opt);
      exit(2);
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--lib") {
      lib = need_value("--lib");
    } else if (a == "--trace-file") {
      vars.emplace_back("CDSA_TRACE_FILE", need_value("--trace-file"));
    } else if (a == "--trace") {
      vars.emplace_back("CDSA_TRACE", need_value("--trace"));
    } else if (a == "--native-depth") {
      vars.emplace_back("CDSA_NATIVE_DEPTH", need_value("--native-depth"));
    } else if (a == "--python-depth") {
      vars.emplace_back("CDSA_PYTHON_DEPTH", need_value("--python-depth"));
    } else if (a == "--ring-size") {
      vars.emplace_back("CDSA_RING_SIZE", need_value("--ring-size"));
    } else if (a == "--backend") {
      vars.emplace_back("CDSA_BACKEND", need_value("--backend"));
    } else if (a == "--exit-probe-ms") {
      vars.emplace_back("CDSA_EXIT_PROBE_MS", need_value("--exit-probe-ms"));
    } else if (a == "--no-breadcrumbs") {
      vars.emplace_back("CDSA_BREADCRUMBS", "0");
    } else if (a == "--quiet") {
      vars.emplace_back("CDSA_QUIET", "1");
    } else if (a == "--profile") {
      vars.emplace_back("CDSA_PROFILE", "1");
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "cdsa run: unknown option %s (see cdsa run --help)\n", a.c_str());
      return 2;
    } else {
      break;  // the command starts here (no "--" given)
    }
  }
  if (i >= argc) {
    fprintf(stderr, "cdsa run: no command given (usage: cdsa run [options] -- CMD [ARGS...])\n");
    return 2;
  }
  if (lib.empty()) {
    for (const char* rel : {"/../lib/libcdsa.so", "/../lib/cdsa/libcdsa.so", "/libcdsa.so"}) {
      std::string cand = self_dir() + rel;
      if (is_file(cand)) {
        char real[PATH_MAX];
        lib = realpath(cand.c_str(), real) ? real : cand;
        break;
      }
    }
    if (lib.empty()) {
      fprintf(stderr, "cdsa run: libcdsa.so not found next to %s; pass --lib PATH\n", self_dir().c_str());
      return 2;
    }
  } else if (!is_file(lib)) {
    fprintf(stderr, "cdsa run: --lib %s: no such file\n", lib.c_str());
    return 2;
  }
  // A sanitizer runtime already in LD_PRELOAD must stay first (it refuses to start otherwise).
  const char* old = getenv("LD_PRELOAD");
  std::string first, rest;
  for (const char* p = old ? old : ""; *p;) {
    size_t n = strcspn(p, ": ");
    std::string entry(p, n);
    p += n;
    if (*p) ++p;
    if (entry.empty()) continue;
    std::string base = entry.substr(entry.rfind('/') == std::string::npos ? 0 : entry.rfind('/') + 1);
    bool sanitizer = base.rfind("libasan", 0) == 0 || base.rfind("libtsan", 0) == 0 ||
                     base.rfind("libclang_rt.", 0) == 0 || base.rfind("libubsan", 0) == 0;
    std::string& to = sanitizer ? first : rest;
    to += (to.empty() ? "" : ":") + entry;
  }
  std::string preload = first.empty() ? lib : first + ":" + lib;
  if (!rest.empty()) preload += ":" + rest;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  for (auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);

  // Become the command: its pid, signals, job control and exit status are the command's own.
  execvp(argv[i], argv + i);
  fprintf(stderr, "cdsa run: cannot run %s: %s\n", argv[i], strerror(errno));
  return 127;
}

}  // namespace

int main_entry(int argc, char** argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("cdsa %s\n", CDSA_VERSION);
    return 0;
  }
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(argv[1], "doctor")) return doctor_command(argc - 2, argv + 2);
  int rc = trace_command(argv[1], argc - 2, argv + 2);
  if (rc >= 0) return rc;
  fprintf(stderr, "cdsa: unknown command '%s' (see cdsa --help)\n", argv[1]);
  return 2;
}

}  // namespace cdsa::cli

int main(int argc, char** argv) { return cdsa::cli::main_entry(argc, argv); }
