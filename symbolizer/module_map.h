// cdsa symbolizer: module map (which ELF objects are loaded where).
//
// Contract:
//  - capture_module_map(): thread-safe (dl_iterate_phdr holds the loader
//    lock while iterating; nothing global is mutated). Allocates. Call it in
//    the report path or when writing a post-mortem trace, never on the
//    kernel-launch hot path. Reads only process memory plus readlink/realpath
//    of paths; it does not open the module files.
//  - find_module(): thread-safe, pure, no allocation; usable anywhere.
//  - read_build_id_from_file(): reentrant, allocates, does file I/O; never
//    blocks on a FIFO/device and never crashes on garbage or truncated files.
//  - No function here throws.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include <vector>

namespace cdsa::symbolizer {

// One PT_LOAD segment as mapped in the process.
struct Segment {
  uint64_t start = 0;        // runtime address: bias + p_vaddr
  uint64_t end = 0;          // exclusive: start + p_memsz
  uint64_t file_offset = 0;  // p_offset
  uint32_t flags = 0;        // p_flags (PF_R | PF_W | PF_X)
};

// One loaded ELF object.
struct Module {
  // Absolute path of the file as loaded. The main program is resolved through
  // /proc/self/exe; relative dlopen names are made absolute with realpath().
  // Non-file objects keep the loader's name (e.g. "linux-vdso.so.1").
  std::string path;
  // Load bias (dlpi_addr): runtime address = bias + ELF virtual address, so
  // (pc - bias) is the address `addr2line -e path` takes. 0 for ET_EXEC.
  uint64_t bias = 0;
  std::vector<Segment> segments;  // PT_LOAD segments, in program-header order
  // GNU build-id (NT_GNU_BUILD_ID), lower-case hex, read from the mapped
  // PT_NOTE; "" when the object has none.
  std::string build_id;
};

// Snapshot of all objects currently loaded (dl_iterate_phdr order: main
// program first). Objects without PT_LOAD segments are skipped.
std::vector<Module> capture_module_map();

// The module whose PT_LOAD segment contains `pc`, or nullptr. The pointer is
// into `map` (valid while `map` is unchanged).
const Module* find_module(const std::vector<Module>& map, uint64_t pc);

// Reads the GNU build-id of the ELF file at `path` with cdsa's own ELF note
// reader (PT_NOTE, then SHT_NOTE): lower-case hex ("" if the file has no
// build-id), or why not, e.g. "No such file or directory", "not an ELF file",
// "truncated ELF file: ...", "not a regular file".
base::StatusOr<std::string> read_build_id_from_file(const std::string& path);

}  // namespace cdsa::symbolizer
