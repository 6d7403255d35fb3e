// libc's own dlsym/dlvsym (and any libc function), found by reading libc's ELF
// dynamic symbol table through dl_iterate_phdr: never through dlsym, which
// cdsa interposes.
//
// This file is compiled without sanitizers (with dl_hooks.cc): a sanitizer
// runtime calls dlsym -- that is, cdsa's hook -- while it initialises, before
// instrumented code can run.
#include "shim/common/libc_symbols.h"

#include <dlfcn.h>
#include <atomic>
#include <cstring>
#include <elf.h>
#include <link.h>
#include <type_traits>

#include "shim/common/driver.h"

namespace cdsa {
namespace {

// Own string helpers: a sanitizer runtime intercepts strcmp/strstr and cannot serve them yet when it calls us.
bool same(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
bool contains(const char* hay, const char* needle) {
  for (; *hay; ++hay) {
    const char *h = hay, *n = needle;
    while (*n && *h == *n) ++h, ++n;
    if (!*n) return true;
  }
  return false;
}

// ---- finding libc's own dlsym/dlvsym without calling dlsym ----
struct LibcLookup {
  const char* name;
  const char* version;
  void* result;
};

// Number of symbols from DT_GNU_HASH (the dynamic section has no count).
uint32_t gnu_hash_symbol_count(const uint32_t* h) {
  uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
  const uint32_t* buckets = h + 4 + bloom_size * (sizeof(ElfW(Addr)) / 4);
  const uint32_t* chain = buckets + nbuckets;
  uint32_t last = 0;
  for (uint32_t i = 0; i < nbuckets; ++i)
    if (buckets[i] > last) last = buckets[i];
  if (last < symoffset) return symoffset;
  while (!(chain[last - symoffset] & 1)) ++last;
  return last + 1;
}

int find_in_libc(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<LibcLookup*>(data);
  const char* name = info->dlpi_name;
  if (!name || (!contains(name, "/libc.so") && !contains(name, "/libdl.so"))) return 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn) return 0;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Half)* versym = nullptr;
  const ElfW(Verdef)* verdef = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  // glibc has already relocated these entries to absolute addresses.
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(d->d_un.d_ptr); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(d->d_un.d_ptr); break;
      case DT_VERSYM: versym = reinterpret_cast<const ElfW(Half)*>(d->d_un.d_ptr); break;
      case DT_VERDEF: verdef = reinterpret_cast<const ElfW(Verdef)*>(d->d_un.d_ptr); break;
      case DT_GNU_HASH: gnu_hash = reinterpret_cast<const uint32_t*>(d->d_un.d_ptr); break;
      case DT_HASH: sysv_hash = reinterpret_cast<const uint32_t*>(d->d_un.d_ptr); break;
    }
  }
  if (!symtab || !strtab) return 0;
  // Some loaders leave these entries unrelocated: make them absolute.
  auto fix = [&](auto*& p) {
    if (p && reinterpret_cast<ElfW(Addr)>(p) < info->dlpi_addr)
      p = reinterpret_cast<std::remove_reference_t<decltype(p)>>(reinterpret_cast<ElfW(Addr)>(p) + info->dlpi_addr);
  };
  fix(symtab);
  fix(strtab);
  fix(versym);
  fix(verdef);
  fix(gnu_hash);
  fix(sysv_hash);
  uint32_t count = gnu_hash ? gnu_hash_symbol_count(gnu_hash) : sysv_hash ? sysv_hash[1] : 0;
  for (uint32_t i = 0; i < count; ++i) {
    const ElfW(Sym)& s = symtab[i];
    if (s.st_value == 0 || !same(strtab + s.st_name, q->name)) continue;
    if (q->version && versym && verdef) {
      ElfW(Half) ndx = versym[i] & 0x7fff;
      const ElfW(Verdef)* vd = verdef;
      bool match = false;
      for (;;) {
        if (vd->vd_ndx == ndx) {
          auto* aux = reinterpret_cast<const ElfW(Verdaux)*>(reinterpret_cast<const char*>(vd) + vd->vd_aux);
          match = same(strtab + aux->vda_name, q->version);
          break;
        }
        if (!vd->vd_next) break;
        vd = reinterpret_cast<const ElfW(Verdef)*>(reinterpret_cast<const char*>(vd) + vd->vd_next);
      }
      if (!match) continue;
    }
    q->result = reinterpret_cast<void*>(info->dlpi_addr + s.st_value);
    return 1;
  }
  return 0;
}

void* libc_symbol(const char* name) {
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", nullptr};
  for (const char* const* v = kVersions;; ++v) {
    LibcLookup q{name, *v, nullptr};
    dl_iterate_phdr(find_in_libc, &q);
    if (q.result || !*v) return q.result;
  }
}

std::atomic<DlsymFn> g_dlsym{nullptr};
std::atomic<DlvsymFn> g_dlvsym{nullptr};
std::atomic<DlsymFn> g_next_dlsym{nullptr};
std::atomic<DlvsymFn> g_next_dlvsym{nullptr};

}  // namespace

DlsymFn real_dlsym() noexcept { return real_libc(g_dlsym, "dlsym"); }

DlvsymFn real_dlvsym() noexcept { return real_libc(g_dlvsym, "dlvsym"); }

void* libc_function(const char* name) noexcept { return libc_symbol(name); }

// libc's dlsym resolves RTLD_NEXT relative to its caller: this function, in libcdsa.so (noinline keeps the call
// here). An unversioned lookup finds the next object's default version or unversioned definition: another
// interposer's dlsym whether it was built with symbol versions or not.
__attribute__((noinline)) void* next_function(const char* name) noexcept {
  void* p = real_dlsym()(RTLD_NEXT, name);
  return p ? p : libc_symbol(name);
}

DlsymFn next_dlsym() noexcept { return next_libc(g_next_dlsym, "dlsym"); }

DlvsymFn next_dlvsym() noexcept { return next_libc(g_next_dlvsym, "dlvsym"); }


}  // namespace cdsa
