#include "cli/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace cdsa::cli {

int capture(const std::vector<std::string>& args, std::string* out, std::string* err) {
  int fds[2], efds[2] = {-1, -1};
  if (args.empty() || pipe2(fds, O_CLOEXEC) != 0) return -1;
  if (err && pipe2(efds, O_CLOEXEC) != 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {fds[0], fds[1], efds[0], efds[1]})
      if (fd >= 0) close(fd);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    if (err) dup2(efds[1], 2);
    std::vector<char*> av;
    for (auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execvp(av[0], av.data());
    _exit(127);
  }
  close(fds[1]);
  if (err) close(efds[1]);
  // Both pipes read together: a child that fills one while we block on the other would never finish.
  struct pollfd pf[2] = {{fds[0], POLLIN, 0}, {efds[0], POLLIN, 0}};
  std::string* sink[2] = {out, err};
  int open = err ? 2 : 1;
  char buf[4096];
  while (open > 0) {
    if (poll(pf, err ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < (err ? 2 : 1); ++k) {
      if (pf[k].fd < 0 || !(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = read(pf[k].fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        close(pf[k].fd);
        pf[k].fd = -1;
        --open;
      } else if (sink[k]->size() < (1u << 20)) {
        sink[k]->append(buf, static_cast<size_t>(r));
      }
    }
  }
  for (auto& p : pf)
    if (p.fd >= 0) close(p.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string field(const std::string& text, const std::string& key) {
  const std::string k = key + "=";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, k.size(), k) == 0) return text.substr(pos + k.size(), end - pos - k.size());
    pos = end + 1;
  }
  return "";
}

}  // namespace cdsa::cli
