// Internal to cdsa_symbolizer: a small, defensive ELF file reader.
//
// Contract:
//  - Thread-safety: an ElfReader instance is not thread-safe; distinct
//    instances may be used concurrently. The free functions are reentrant.
//  - Allocates: yes (std::string / std::vector). Never throws (no exceptions
//    used), never aborts on malformed input: every offset/size read from the
//    file is bounds-checked against the file size.
//  - Never blocks on odd files: open() uses O_NONBLOCK and accepts only
//    regular files (a FIFO or device at the path is refused, not opened for
//    reading).
//  - When to call: report path / CLI only (does file I/O), never on a hot path.
//
// Only host-endian ELF is supported (ELFCLASS32 and ELFCLASS64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace cdsa::symbolizer::internal {

// Lower-case hex encoding of `n` bytes.
std::string to_hex(const unsigned char* data, size_t n);

// Scans an ELF note area (as found in a PT_NOTE segment or SHT_NOTE section)
// for NT_GNU_BUILD_ID with owner "GNU" and returns its descriptor as hex, or
// "" when absent. `align` is the note alignment (4 or 8; anything else is
// treated as 4). Never reads outside [data, data+size).
std::string find_gnu_build_id_in_notes(const unsigned char* data, size_t size,
                                       size_t align);

struct ElfSymbol {
  uint64_t value = 0;  // st_value (ELF virtual address)
  uint64_t size = 0;   // st_size (> 0 for every symbol returned)
  std::string name;    // raw (mangled) name
};

class ElfReader {
 public:
  ElfReader() = default;
  ~ElfReader();
  ElfReader(const ElfReader&) = delete;
  ElfReader& operator=(const ElfReader&) = delete;

  // Opens and validates the ELF header and program/section header tables.
  // On failure the status says why in a few words (e.g. "No such file or
  // directory", "not an ELF file", "truncated ELF file: ...").
  base::Status open(const std::string& path);

  uint16_t elf_type() const { return e_type_; }  // ET_EXEC, ET_DYN, ...

  // The GNU build-id from the file (PT_NOTE segments first, then SHT_NOTE
  // sections) as lower-case hex, "" when the file has none; an error only on
  // I/O or structural problems.
  base::StatusOr<std::string> build_id();

  // Function symbols (STT_FUNC / STT_GNU_IFUNC, defined, st_size > 0) from
  // .symtab, or from .dynsym when there is no .symtab, sorted by value (none
  // for a stripped file).
  base::StatusOr<std::vector<ElfSymbol>> function_symbols();

  // CRC-32 (as used by .gnu_debuglink) of the whole file.
  base::StatusOr<uint32_t> crc32();

 private:
  struct Phdr {
    uint32_t type, flags;
    uint64_t offset, vaddr, filesz, memsz, align;
  };
  struct Shdr {
    uint32_t name, type;
    uint64_t flags, addr, offset, size;
    uint32_t link, info;
    uint64_t addralign, entsize;
  };

  bool read_at(uint64_t offset, void* buf, size_t n) const;
  base::Status read_vec(uint64_t offset, uint64_t size, std::vector<unsigned char>* out) const;

  int fd_ = -1;
  uint64_t file_size_ = 0;
  bool is64_ = true;
  uint16_t e_type_ = 0;
  std::vector<Phdr> phdrs_;
  std::vector<Shdr> shdrs_;
};

}  // namespace cdsa::symbolizer::internal
