#include "symbolizer/elf_reader.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/io.h"

namespace cdsa::symbolizer::internal {

namespace {

// Tables larger than this are refused rather than read (defensive bound).
constexpr uint64_t kMaxTableBytes = uint64_t{1} << 31;  // 2 GiB
constexpr uint32_t kMaxHeaders = 1u << 20;

bool host_is_little_endian() {
  const uint16_t v = 1;
  unsigned char b;
  std::memcpy(&b, &v, 1);
  return b == 1;
}

bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace

std::string to_hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.resize(n * 2);
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[data[i] >> 4];
    s[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return s;
}

std::string find_gnu_build_id_in_notes(const unsigned char* data, size_t size,
                                       size_t align) {
  if (align != 8) align = 4;
  auto round_up = [align](uint64_t v) { return (v + align - 1) & ~uint64_t(align - 1); };
  uint64_t pos = 0;
  while (pos + 12 <= size) {
    uint32_t namesz, descsz, type;
    std::memcpy(&namesz, data + pos, 4);
    std::memcpy(&descsz, data + pos + 4, 4);
    std::memcpy(&type, data + pos + 8, 4);
    const uint64_t name_off = pos + 12;
    const uint64_t desc_off = name_off + round_up(namesz);
    const uint64_t next = desc_off + round_up(descsz);
    if (desc_off > size || desc_off + descsz > size) break;  // truncated note
    if (type == NT_GNU_BUILD_ID && namesz == 4 &&
        std::memcmp(data + name_off, "GNU", 4) == 0 && descsz > 0) {
      return to_hex(data + desc_off, descsz);
    }
    if (next <= pos) break;
    pos = next;
  }
  return {};
}

ElfReader::~ElfReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool ElfReader::read_at(uint64_t offset, void* buf, size_t n) const {
  uint64_t end;
  if (add_overflows(offset, n, &end) || end > file_size_) return false;
  return base::read_full(fd_, buf, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
}

base::Status ElfReader::read_vec(uint64_t offset, uint64_t size, std::vector<unsigned char>* out) const {
  uint64_t end;
  if (add_overflows(offset, size, &end) || end > file_size_) {
    return base::Status::error("truncated ELF file: data extends past end of file");
  }
  if (size > kMaxTableBytes) {
    return base::Status::error("ELF table too large");
  }
  out->resize(size);
  if (size != 0 && !read_at(offset, out->data(), size)) {
    return base::Status::error("read error");
  }
  return {};
}

base::Status ElfReader::open(const std::string& path) {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  phdrs_.clear();
  shdrs_.clear();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return base::Status::error(std::strerror(errno));
  }
  fd_ = fd;
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return base::Status::error(std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return base::Status::error("not a regular file");
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (file_size_ == 0) {
    return base::Status::error("empty file");
  }

  unsigned char ident[EI_NIDENT];
  if (file_size_ < EI_NIDENT || !read_at(0, ident, EI_NIDENT) ||
      std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    return base::Status::error("not an ELF file");
  }
  if (ident[EI_CLASS] != ELFCLASS32 && ident[EI_CLASS] != ELFCLASS64) {
    return base::Status::error("unsupported ELF class");
  }
  const unsigned char host_data = host_is_little_endian() ? ELFDATA2LSB : ELFDATA2MSB;
  if (ident[EI_DATA] != host_data) {
    return base::Status::error("unsupported ELF byte order");
  }
  is64_ = ident[EI_CLASS] == ELFCLASS64;

  uint64_t phoff, shoff;
  uint32_t phnum, shnum;
  uint16_t phentsize, shentsize;
  // Both ELF classes carry the same header fields, at different widths.
  auto read_header = [&](auto eh) {
    if (!read_at(0, &eh, sizeof eh)) return false;
    e_type_ = eh.e_type;
    phoff = eh.e_phoff;
    shoff = eh.e_shoff;
    phnum = eh.e_phnum;
    shnum = eh.e_shnum;
    phentsize = eh.e_phentsize;
    shentsize = eh.e_shentsize;
    return true;
  };
  if (!(is64_ ? read_header(Elf64_Ehdr{}) : read_header(Elf32_Ehdr{})))
    return base::Status::error("truncated ELF file: incomplete ELF header");
  const size_t want_ph = is64_ ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
  const size_t want_sh = is64_ ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);

  auto read_shdr = [&](uint64_t off, Shdr* s) -> bool {
    if (is64_) {
      Elf64_Shdr h;
      if (!read_at(off, &h, sizeof h)) return false;
      *s = {h.sh_name, h.sh_type, h.sh_flags, h.sh_addr, h.sh_offset, h.sh_size,
            h.sh_link, h.sh_info, h.sh_addralign, h.sh_entsize};
    } else {
      Elf32_Shdr h;
      if (!read_at(off, &h, sizeof h)) return false;
      *s = {h.sh_name, h.sh_type, h.sh_flags, h.sh_addr, h.sh_offset, h.sh_size,
            h.sh_link, h.sh_info, h.sh_addralign, h.sh_entsize};
    }
    return true;
  };

  // Extended numbering: real counts live in section header 0.
  if (shoff != 0 && (shnum == 0 || phnum == PN_XNUM)) {
    if (shentsize < want_sh) {
      return base::Status::error("malformed ELF file: bad section header size");
    }
    Shdr s0;
    if (!read_shdr(shoff, &s0)) {
      return base::Status::error("truncated ELF file: section headers beyond end of file");
    }
    if (shnum == 0) shnum = static_cast<uint32_t>(std::min<uint64_t>(s0.size, kMaxHeaders + 1));
    if (phnum == PN_XNUM) phnum = s0.info;
  }
  if (phnum > kMaxHeaders || shnum > kMaxHeaders) {
    return base::Status::error("malformed ELF file: too many headers");
  }

  if (phnum != 0) {
    if (phentsize < want_ph) {
      return base::Status::error("malformed ELF file: bad program header size");
    }
    phdrs_.reserve(phnum);
    for (uint32_t i = 0; i < phnum; ++i) {
      const uint64_t off = phoff + uint64_t(i) * phentsize;
      Phdr p;
      if (is64_) {
        Elf64_Phdr h;
        if (!read_at(off, &h, sizeof h)) {
          return base::Status::error("truncated ELF file: program headers beyond end of file");
        }
        p = {h.p_type, h.p_flags, h.p_offset, h.p_vaddr, h.p_filesz, h.p_memsz, h.p_align};
      } else {
        Elf32_Phdr h;
        if (!read_at(off, &h, sizeof h)) {
          return base::Status::error("truncated ELF file: program headers beyond end of file");
        }
        p = {h.p_type, h.p_flags, h.p_offset, h.p_vaddr, h.p_filesz, h.p_memsz, h.p_align};
      }
      phdrs_.push_back(p);
    }
  }
  if (shoff != 0 && shnum != 0) {
    if (shentsize < want_sh) {
      return base::Status::error("malformed ELF file: bad section header size");
    }
    shdrs_.reserve(shnum);
    for (uint32_t i = 0; i < shnum; ++i) {
      Shdr s;
      if (!read_shdr(shoff + uint64_t(i) * shentsize, &s)) {
        // Section headers are optional at run time; a file cut short after
        // its loadable part is still reported as truncated, since symbols
        // and debug info would be missing.
        return base::Status::error("truncated ELF file: section headers beyond end of file");
      }
      shdrs_.push_back(s);
    }
  }
  if (phdrs_.empty() && shdrs_.empty()) {
    return base::Status::error("malformed ELF file: no program or section headers");
  }
  return {};
}

base::StatusOr<std::string> ElfReader::build_id() {
  std::vector<unsigned char> buf;
  for (const Phdr& p : phdrs_) {
    if (p.type != PT_NOTE || p.filesz == 0) continue;
    if (base::Status st = read_vec(p.offset, p.filesz, &buf); !st.ok()) return st;
    std::string hex = find_gnu_build_id_in_notes(buf.data(), buf.size(), p.align);
    if (!hex.empty()) return hex;
  }
  for (const Shdr& sh : shdrs_) {
    if (sh.type != SHT_NOTE || sh.size == 0) continue;
    if (base::Status st = read_vec(sh.offset, sh.size, &buf); !st.ok()) return st;
    std::string hex = find_gnu_build_id_in_notes(buf.data(), buf.size(), sh.addralign);
    if (!hex.empty()) return hex;
  }
  return std::string();
}

base::StatusOr<std::vector<ElfSymbol>> ElfReader::function_symbols() {
  std::vector<ElfSymbol> out;
  const Shdr* symtab = nullptr;
  for (const Shdr& s : shdrs_)
    if (s.type == SHT_SYMTAB) symtab = &s;
  if (symtab == nullptr)
    for (const Shdr& s : shdrs_)
      if (s.type == SHT_DYNSYM) symtab = &s;
  if (symtab == nullptr) return out;  // stripped: no symbols, not an error
  if (symtab->link >= shdrs_.size()) {
    return base::Status::error("malformed ELF file: bad symbol string table link");
  }
  const Shdr& strtab = shdrs_[symtab->link];
  std::vector<unsigned char> syms, strs;
  if (base::Status st = read_vec(symtab->offset, symtab->size, &syms); !st.ok()) return st;
  if (base::Status st = read_vec(strtab.offset, strtab.size, &strs); !st.ok()) return st;
  const size_t entsize = is64_ ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym);
  const size_t count = syms.size() / entsize;
  for (size_t i = 0; i < count; ++i) {
    uint32_t name;
    unsigned char info;
    uint16_t shndx;
    uint64_t value, size;
    if (is64_) {
      Elf64_Sym s;
      std::memcpy(&s, syms.data() + i * entsize, sizeof s);
      name = s.st_name; info = s.st_info; shndx = s.st_shndx; value = s.st_value; size = s.st_size;
    } else {
      Elf32_Sym s;
      std::memcpy(&s, syms.data() + i * entsize, sizeof s);
      name = s.st_name; info = s.st_info; shndx = s.st_shndx; value = s.st_value; size = s.st_size;
    }
    const unsigned type = ELF64_ST_TYPE(info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || shndx == SHN_UNDEF || size == 0) continue;
    if (name >= strs.size()) continue;
    const char* begin = reinterpret_cast<const char*>(strs.data()) + name;
    const size_t maxlen = strs.size() - name;
    const size_t len = strnlen(begin, maxlen);
    if (len == 0 || len == maxlen) continue;  // empty or unterminated
    out.push_back(ElfSymbol{value, size, std::string(begin, len)});
  }
  std::sort(out.begin(), out.end(), [](const ElfSymbol& a, const ElfSymbol& b) {
    return a.value != b.value ? a.value < b.value : a.size > b.size;
  });
  return out;
}

base::StatusOr<uint32_t> ElfReader::crc32() {
  static uint32_t table[256];
  static bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  uint32_t crc = 0xffffffffu;
  std::vector<unsigned char> buf(1 << 16);
  uint64_t off = 0;
  while (off < file_size_) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), file_size_ - off));
    if (!read_at(off, buf.data(), n)) {
      return base::Status::error("read error");
    }
    for (size_t i = 0; i < n; ++i) crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
    off += n;
  }
  return crc ^ 0xffffffffu;
}

}  // namespace cdsa::symbolizer::internal
