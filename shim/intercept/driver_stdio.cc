// The device text under any binding: libcuda's own stdio imports bound as the
// global scope binds them (see libc_hooks.h).
//
// dlopen("libcuda.so.1", RTLD_NOW | RTLD_DEEPBIND) makes libcuda look up its
// symbols in its own dependencies first: its fprintf then binds to libc's, past
// cdsa's hook, and the device's assert text is never captured. Once cdsa starts
// it reads libcuda's relocations (DT_JMPREL and DT_RELA, through the link map)
// and, for each GOT entry of a hooked stdio/write function:
//   - holding libc's own definition while the global scope resolves the name to
//     something else (cdsa's hook, or an interposer before cdsa): deep-bound; set
//     to what the global scope resolves;
//   - not bound yet (a lazy PLT entry, pointing into libcuda itself): set to the
//     same, which is what the lazy binding of a plain load would do;
//   - anything else (cdsa's hook, another interposer's, or a GOT another tool patched): left alone.
// An object in another dlmopen namespace is left alone entirely (it has its own libc: out of scope).
// The GOT is read-only after relocation when it is in PT_GNU_RELRO: those pages
// are made writable for the store and read-only again. Each entry is one aligned
// pointer store, so a thread calling through it meanwhile sees the old or the new
// function, both of which print the same bytes.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#include <cstring>

#include "shim/common/driver.h"
#include "shim/common/libc_symbols.h"
#include "shim/intercept/libc_hooks.h"

namespace cdsa {
namespace {

bool is_import_slot(uint32_t type) {
#if defined(__x86_64__)
  return type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
  return type == R_AARCH64_JUMP_SLOT || type == R_AARCH64_GLOB_DAT;
#else
  (void)type;
  return false;
#endif
}

struct Object {
  ElfW(Addr) base = 0;
  const ElfW(Phdr)* phdr = nullptr;
  ElfW(Half) phnum = 0;
};

int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* o = static_cast<Object*>(data);
  if (info->dlpi_addr != o->base) return 0;
  o->phdr = info->dlpi_phdr;
  o->phnum = info->dlpi_phnum;
  return 1;
}

// Whether the page holding `addr` is one the loader made read-only after relocation: PT_GNU_RELRO rounded as glibc
// rounds it (_dl_protect_relro: start and end down to a page; a partial last page stays writable).
bool read_only_relro(const Object& o, ElfW(Addr) addr, ElfW(Addr) page) {
  for (ElfW(Half) i = 0; i < o.phnum; ++i) {
    const ElfW(Phdr)& p = o.phdr[i];
    if (p.p_type != PT_GNU_RELRO) continue;
    ElfW(Addr) lo = (o.base + p.p_vaddr) & ~(page - 1), hi = (o.base + p.p_vaddr + p.p_memsz) & ~(page - 1);
    if (addr >= lo && addr < hi) return true;
  }
  return false;
}

bool store_slot(const Object& o, void** slot, void* value) {
  const auto addr = reinterpret_cast<ElfW(Addr)>(slot);
  const auto page = static_cast<ElfW(Addr)>(sysconf(_SC_PAGESIZE));
  if (!read_only_relro(o, addr, page)) {
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    return true;
  }
  void* first = reinterpret_cast<void*>(addr & ~(page - 1));  // one aligned pointer never straddles a page
  if (mprotect(first, page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, value, __ATOMIC_RELEASE);
  mprotect(first, page, PROT_READ);  // as the loader left it
  return true;
}

const char* find_hook(const char* const* hooks, size_t n, const char* name) {
  for (size_t i = 0; i < n; ++i)
    if (strcmp(hooks[i], name) == 0) return hooks[i];
  return nullptr;
}

bool same_object(const void* p, const link_map* map) {
  Dl_info info;
  link_map* m = nullptr;
  return p && dladdr1(p, &info, reinterpret_cast<void**>(&m), RTLD_DL_LINKMAP) && m == map;
}

}  // namespace

int bind_driver_stdio(const void* driver_function) noexcept {
  Dl_info info;
  link_map* map = nullptr;
  if (!driver_function ||
      !dladdr1(driver_function, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) || !map || !map->l_ld)
    return 0;
  // Another dlmopen namespace has its own libc (and FILE objects): never hand its calls to this one's hooks.
  Lmid_t ns = LM_ID_BASE;
  if (dlinfo(map, RTLD_DI_LMID, &ns) != 0 || ns != LM_ID_BASE) return 0;
  Object o;
  o.base = map->l_addr;
  dl_iterate_phdr(find_object, &o);
  if (!o.phdr) return 0;

  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  ElfW(Addr) jmprel = 0, rela = 0;
  size_t jmprel_size = 0, rela_size = 0;
  bool plt_is_rela = true;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(d->d_un.d_ptr); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(d->d_un.d_ptr); break;
      case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
      case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
      case DT_PLTREL: plt_is_rela = d->d_un.d_val == DT_RELA; break;
      case DT_RELA: rela = d->d_un.d_ptr; break;
      case DT_RELASZ: rela_size = d->d_un.d_val; break;
    }
  }
  if (!symtab || !strtab || !plt_is_rela) return 0;  // x86-64 and AArch64 use RELA
  // glibc relocates these entries to absolute addresses; some loaders leave them relative.
  auto absolute = [&](ElfW(Addr) p) { return p && p < o.base ? p + o.base : p; };
  symtab = reinterpret_cast<const ElfW(Sym)*>(absolute(reinterpret_cast<ElfW(Addr)>(symtab)));
  strtab = reinterpret_cast<const char*>(absolute(reinterpret_cast<ElfW(Addr)>(strtab)));
  jmprel = absolute(jmprel);
  rela = absolute(rela);

  size_t nhooks = 0;
  const char* const* hooks = stdio_hook_names(&nhooks);
  int changed = 0;
  auto visit = [&](ElfW(Addr) table, size_t size) {
    if (!table) return;
    const auto* r = reinterpret_cast<const ElfW(Rela)*>(table);
    for (size_t i = 0; i < size / sizeof(ElfW(Rela)); ++i) {
      if (!is_import_slot(static_cast<uint32_t>(ELF64_R_TYPE(r[i].r_info)))) continue;
      const size_t sym = ELF64_R_SYM(r[i].r_info);
      if (sym == 0) continue;
      const char* name = find_hook(hooks, nhooks, strtab + symtab[sym].st_name);
      if (!name) continue;
      void** slot = reinterpret_cast<void**>(o.base + r[i].r_offset);
      void* cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
      // What a plain load binds the name to: the first definition in the global scope.
      void* global = real_dlsym()(RTLD_DEFAULT, name);
      if (!global || cur == global) continue;
      if (cur != libc_function(name) && !same_object(cur, map)) continue;  // another interposer's: keep it
      if (store_slot(o, slot, global)) ++changed;
    }
  };
  visit(jmprel, jmprel_size);
  visit(rela, rela_size);
  return changed;
}

}  // namespace cdsa
