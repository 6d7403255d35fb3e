// Opens a library that cdsa may carry itself (the Python wheel ships libunwind, libdw and their
// dependencies in cdsa/lib/vendor/) before the system's copy.
//
// Contract: `dlopen_dirs_then_system(soname, dirs, ...)` tries <dir>/<soname> for each dir holding that file, then
// the loader's own search. `dlopen_bundled_first(soname, anchor, ...)` finds the file of the loaded object that holds
// `anchor` (libcdsa.so for the preload library, the executable for the CLI), and tries, in order,
//   <its dir>/vendor/<soname>          (libcdsa.so in cdsa/lib/)
//   <its dir>/../lib/vendor/<soname>   (the CLI in cdsa/bin/)
//   <soname>                           (the dynamic loader's search: the system's copy)
// each with dlopen(RTLD_NOW | RTLD_LOCAL). Returns the handle or nullptr. `used` gets the path that
// loaded ("" when none did); `why` gets one line naming every failure, for the caller's single notice.
// Header-only and allocation-free (fixed buffers) so that libcdsa.so, which must not throw or pull in
// more than libc, and the CLI can share it. Not for hot paths: it reads /proc/self/exe and calls dlopen.
#pragma once

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cdsa::bundled {

struct FindObject {
  uintptr_t addr;
  char path[PATH_MAX];
  bool found;
};

inline int find_object_cb(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindObject*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (f->addr < lo || f->addr >= lo + ph.p_memsz) continue;
    const char* name = info->dlpi_name;
    if (name == nullptr || name[0] == '\0') {  // the main program
      ssize_t n = readlink("/proc/self/exe", f->path, sizeof f->path - 1);
      if (n <= 0) return 1;
      f->path[n] = '\0';
    } else if (realpath(name, f->path) == nullptr) {
      snprintf(f->path, sizeof f->path, "%s", name);
    }
    f->found = true;
    return 1;
  }
  return 0;
}

// The directory of the loaded object holding `anchor`, into out (no trailing slash). False if unknown.
inline bool object_dir(const void* anchor, char* out, size_t cap) {
  FindObject f{};
  f.addr = reinterpret_cast<uintptr_t>(anchor);
  dl_iterate_phdr(find_object_cb, &f);
  if (!f.found) return false;
  char* slash = strrchr(f.path, '/');
  if (slash == nullptr) return false;
  const size_t n = static_cast<size_t>(slash - f.path);
  if (n + 1 > cap) return false;  // too long to extend: the system's copy is used
  memcpy(out, f.path, n);
  out[n] = '\0';
  return true;
}

// Tries <dir>/<soname> for each of `dirs` that holds the file, then the loader's own search for <soname>.
inline void* dlopen_dirs_then_system(const char* soname, const char* const* dirs, int ndirs, char* used,
                                     size_t used_cap, char* why, size_t why_cap) {
  if (used_cap) used[0] = '\0';
  if (why_cap) why[0] = '\0';
  size_t why_len = 0;
  auto note = [&](const char* what, const char* err) {
    if (why_len + 1 >= why_cap) return;
    int n =
        snprintf(why + why_len, why_cap - why_len, "%s%s: %s", why_len ? "; " : "", what, err ? err : "unknown error");
    if (n > 0) why_len = strlen(why);
  };
  for (int i = 0; i < ndirs; ++i) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dirs[i], soname);
    if (access(path, F_OK) != 0) continue;  // not shipped there: no message
    char real[PATH_MAX];
    const char* p = realpath(path, real) ? real : path;
    if (void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL)) {
      if (used_cap) snprintf(used, used_cap, "%s", p);
      return h;
    }
    note(p, dlerror());
  }
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) {
    if (used_cap) {
      // The file the loader picked, for the doctor and the notices.
      link_map* lm = nullptr;
      if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        snprintf(used, used_cap, "%s", lm->l_name);
      else
        snprintf(used, used_cap, "%s", soname);
    }
    return h;
  }
  note(soname, dlerror());
  return nullptr;
}

inline void* dlopen_bundled_first(const char* soname, const void* anchor, char* used, size_t used_cap, char* why,
                                  size_t why_cap) {
  char dir[PATH_MAX - 16], vendor[PATH_MAX], cli_vendor[PATH_MAX];
  const char* dirs[2] = {vendor, cli_vendor};
  int ndirs = 0;
  if (object_dir(anchor, dir, sizeof dir)) {
    snprintf(vendor, sizeof vendor, "%s/vendor", dir);
    snprintf(cli_vendor, sizeof cli_vendor, "%s/../lib/vendor", dir);
    ndirs = 2;
  }
  return dlopen_dirs_then_system(soname, dirs, ndirs, used, used_cap, why, why_cap);
}

}  // namespace cdsa::bundled
