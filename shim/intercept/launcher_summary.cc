#include "shim/intercept/launcher_summary.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/path.h"
#include "report/trace_head.h"
#include "shim/common/config.h"
#include "shim/common/log.h"
#include "shim/common/reentrancy.h"

extern char** environ;

namespace cdsa {
namespace {

constexpr int kSummarySeconds = 10;   // the CLI's time to read and merge the traces
constexpr long kSlackSeconds = 5;     // a trace's mtime may lag the session's start by this (another host's clock)
constexpr size_t kMaxFiles = 4096;    // names the pattern matches that are looked at

// Plain storage: the exit handler runs in libcdsa.so's own finalization, after the C++ objects of other files.
char g_session[320];
int g_root_pid = 0;
long g_session_start_s = 0;

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// "host:pid:ms" -> its parts.
bool parse_session(const char* s, std::string* host, long* pid, long long* ms) {
  const char* a = strchr(s, ':');
  const char* b = strrchr(s, ':');
  if (!a || a == b) return false;
  host->assign(s, static_cast<size_t>(a - s));
  char* end = nullptr;
  *pid = strtol(a + 1, &end, 10);
  if (end != b || *pid <= 0) return false;
  *ms = strtoll(b + 1, &end, 10);
  return *end == '\0' && *ms >= 0;
}

// The trace pattern as a glob(3) pattern: each %h %p %r %R %t any text, %% a percent sign, the rest literal.
std::string glob_of(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '%' && i + 1 < pattern.size()) {
      char t = pattern[++i];
      if (strchr("hprRt", t)) {
        if (out.empty() || out.back() != '*') out += '*';
        continue;
      }
      if (t != '%') out += '%';  // an unknown token stays as written (report::expand_trace_pattern)
      c = t;
    }
    if (strchr("*?[\\", c)) out += '\\';
    out += c;
  }
  return out;
}

// The names report::write_trace_file picks when the first one is taken: "-N" before the extension.
std::string taken_names(const std::string& g) {
  size_t dot = g.rfind('.'), slash = g.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    return g.substr(0, dot) + "-[0-9]*" + g.substr(dot);
  return g + "-[0-9]*";
}

// What the first bytes of `path` say (report/trace_head.h): not a trace of this session written since it began, one (clean or
// faulted), or one with a fault written by a process other than the root. Never waits for a writer (O_NONBLOCK,
// regular files only).
enum class Seen { Other, SessionTrace, DescendantFault };
Seen look_at(const char* path, const report::TraceHeadProbe& probe) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return Seen::Other;
  struct stat st;
  char head[report::kTraceHeadBytes + 1];
  ssize_t n = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= g_session_start_s - kSlackSeconds) {
    for (ssize_t r; n < static_cast<ssize_t>(report::kTraceHeadBytes); n += r) {
      r = read(fd, head + n, report::kTraceHeadBytes - static_cast<size_t>(n));
      if (r < 0 && errno == EINTR) r = 0;
      else if (r <= 0) break;
    }
  }
  close(fd);
  if (n <= 0) return Seen::Other;
  head[n] = '\0';
  if (!probe.of_session(head)) return Seen::Other;
  return probe.fault(head) && !probe.written_by_process(head) ? Seen::DescendantFault : Seen::SessionTrace;
}

// The cdsa CLI beside this libcdsa.so: the build tree's and the wheel's ../bin/cdsa, an install's lib/cdsa/.
std::string cli_path() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&launcher_session_init), &info) || !info.dli_fname) return "";
  char real[PATH_MAX];
  std::string dir = base::dirname_of(realpath(info.dli_fname, real) ? real : info.dli_fname);
  for (const char* rel : {"/../bin/cdsa", "/../../bin/cdsa", "/cdsa"}) {
    std::string cand = dir + rel;
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

void run_summary(const std::vector<std::string>& files) {
  const std::string again = std::string("cdsa merge --session ") + g_session + " " + base::dirname_of(files.front());
  std::string cli = cli_path();
  if (cli.empty()) {
    log_line("a process this one started faulted (%zu trace file%s of this run); merged: %s (the cdsa CLI is not "
             "beside libcdsa.so)",
             files.size(), files.size() == 1 ? "" : "s", again.c_str());
    return;
  }
  std::vector<std::string> args = {cli, "merge", "--launcher-summary", "--session", g_session};
  args.insert(args.end(), files.begin(), files.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; e && *e; ++e)
    if (strncmp(*e, "CDSA_DISABLE=", 13) != 0) envp.push_back(*e);
  std::string disable = "CDSA_DISABLE=1";  // the CLI loads libcdsa.so too (LD_PRELOAD): passive there
  envp.push_back(disable.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, cli.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return;
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;  // done, or reaped by the program's own SIGCHLD handling
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= kSummarySeconds) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      log_line("the launcher summary was cut off after %d s; again: %s", kSummarySeconds, again.c_str());
      return;
    }
    timespec ts{0, 5000000};  // 5 ms
    nanosleep(&ts, nullptr);
  }
}

void at_root_exit() {
  if (getpid() != g_root_pid) return;  // a forked copy of the root: not the launcher
  const Config& c = config();
  if (c.quiet || c.trace == TraceMode::Off) return;
  InCdsa guard;
  const int saved_errno = errno;
  std::string pattern = c.trace_pattern;
  if (pattern[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return;
    pattern = std::string(cwd) + "/" + pattern;
  }
  const report::TraceHeadProbe probe(g_session, g_root_pid, host_name());
  const std::string g = glob_of(pattern);
  glob_t found;
  memset(&found, 0, sizeof found);
  int rc = glob(g.c_str(), 0, nullptr, &found);
  rc = glob(taken_names(g).c_str(), rc == 0 ? GLOB_APPEND : 0, nullptr, &found);
  std::vector<std::string> names(found.gl_pathv, found.gl_pathv + found.gl_pathc), files;
  globfree(&found);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());  // the two patterns overlap
  bool descendant_fault = false;
  for (size_t i = 0; i < names.size() && i < kMaxFiles; ++i) {
    Seen seen = look_at(names[i].c_str(), probe);
    if (seen != Seen::Other) files.push_back(names[i]);  // clean ranks' exit traces are in the verdict too
    descendant_fault = descendant_fault || seen == Seen::DescendantFault;
  }
  if (descendant_fault) run_summary(files);
  errno = saved_errno;
}

// The threads of this process (/proc/self/status "Threads:"); 0 when unreadable.
int thread_count() {
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* at = strstr(buf, "\nThreads:");
  return at ? atoi(at + 9) : 0;
}

}  // namespace

void launcher_session_init() noexcept {
  if (!config().enabled || config().secure) return;
  // Loaded after the process started threads (dlopen'ed, CUDA_INJECTION64_PATH at cuInit): setenv could race
  // with another thread's getenv, so such a copy never starts a session (it is not the tree's first loader).
  if (!config().session[0] && thread_count() != 1) return;
  const std::string host = host_name();
  const char* s = config().session;  // CDSA_SESSION as the process started
  std::string root_host;
  long pid = 0;
  long long ms = 0;
  if (!s || !*s) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ms = static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
    snprintf(g_session, sizeof g_session, "%s:%d:%lld", host.c_str(), static_cast<int>(getpid()), ms);
    if (setenv("CDSA_SESSION", g_session, 1) != 0) return;  // inherited by every descendant from here on
    begin_session(g_session);  // the root's own trace records it too
  } else if (parse_session(s, &root_host, &pid, &ms) && pid == getpid() && root_host == host &&
             strlen(s) < sizeof g_session) {
    snprintf(g_session, sizeof g_session, "%s", s);  // the root exec'd another program
  } else {
    return;  // a descendant (or a session id this process cannot be the root of)
  }
  g_session_start_s = static_cast<long>(ms / 1000);
  g_root_pid = getpid();
  atexit(at_root_exit);
}

}  // namespace cdsa
