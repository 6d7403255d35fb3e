#include "symbolizer/module_map.h"

#include <elf.h>
#include <link.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "symbolizer/elf_reader.h"

namespace cdsa::symbolizer {

namespace {

struct IterateState {
  std::vector<Module>* out;
  bool first = true;
};

std::string self_exe_path() {
  char buf[PATH_MAX + 1];
  const ssize_t n = ::readlink("/proc/self/exe", buf, PATH_MAX);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

int on_object(struct dl_phdr_info* info, size_t size, void* data) {
  auto* st = static_cast<IterateState*>(data);
  const bool first = st->first;
  st->first = false;
  if (size < offsetof(struct dl_phdr_info, dlpi_phnum) + sizeof(info->dlpi_phnum)) return 0;

  Module m;
  m.bias = static_cast<uint64_t>(info->dlpi_addr);
  // The main program is reported first with an empty name. Its path is
  // resolved after iteration (readlink outside the loader lock).
  const char* name = info->dlpi_name;
  m.path = (name != nullptr && name[0] != '\0') ? name : (first ? "\x01main" : "");

  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      Segment s;
      s.start = m.bias + ph.p_vaddr;
      s.end = s.start + ph.p_memsz;
      s.file_offset = ph.p_offset;
      s.flags = ph.p_flags;
      m.segments.push_back(s);
    }
  }
  if (m.segments.empty()) return 0;
  // PT_NOTE lies inside a readable PT_LOAD mapping; read it in place.
  for (ElfW(Half) i = 0; i < info->dlpi_phnum && m.build_id.empty(); ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE || ph.p_memsz == 0) continue;
    const uint64_t start = m.bias + ph.p_vaddr;
    bool mapped = false;
    for (const Segment& s : m.segments)
      if (start >= s.start && start + ph.p_memsz <= s.end && (s.flags & PF_R)) mapped = true;
    if (!mapped) continue;
    m.build_id = internal::find_gnu_build_id_in_notes(
        reinterpret_cast<const unsigned char*>(start), ph.p_memsz, ph.p_align);
  }
  st->out->push_back(std::move(m));
  return 0;
}

}  // namespace

std::vector<Module> capture_module_map() {
  std::vector<Module> out;
  out.reserve(64);
  IterateState st{&out};
  dl_iterate_phdr(on_object, &st);
  for (Module& m : out) {
    if (m.path == "\x01main") {
      m.path = self_exe_path();
    } else if (!m.path.empty() && m.path[0] != '/' && m.path.find('/') != std::string::npos) {
      // Relative dlopen path (e.g. "./libx.so"): make it absolute so an
      // offline reader can find it. Bare sonames without '/' (the vdso) stay.
      char* real = ::realpath(m.path.c_str(), nullptr);
      if (real != nullptr) {
        m.path = real;
        std::free(real);
      }
    }
  }
  return out;
}

const Module* find_module(const std::vector<Module>& map, uint64_t pc) {
  for (const Module& m : map)
    for (const Segment& s : m.segments)
      if (pc >= s.start && pc < s.end) return &m;
  return nullptr;
}

base::StatusOr<std::string> read_build_id_from_file(const std::string& path) {
  internal::ElfReader r;
  if (base::Status s = r.open(path); !s.ok()) return s;
  return r.build_id();
}

}  // namespace cdsa::symbolizer
