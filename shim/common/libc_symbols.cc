// libc's own dlsym/dlvsym (and any libc function), found by reading libc's ELF
// dynamic symbol table from the loader's list of objects (_r_debug): never
// through dlsym, which cdsa interposes, and calling no function at all.
//
// This file is compiled without sanitizers (with shim/intercept/dl_hooks.cc): a sanitizer
// runtime calls dlsym -- that is, cdsa's hook -- while it initialises, before
// instrumented code can run and before its own interceptors can forward. That
// is why the walk is not dl_iterate_phdr: ThreadSanitizer intercepts it, and
// its init's first dlsym(RTLD_NEXT, "mmap") reached that interceptor before
// it knew the real dl_iterate_phdr (a call through null at every start).
//
// The walk takes no loader lock, and needs none: it stops at libc, and every
// object before it in the list was loaded at start-up, which glibc never
// unloads; objects dlopen'ed later are appended behind it. (Only where libc
// lacks the name, as dlsym before glibc 2.34, does it go on to libdl.)
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

// `q`'s symbol in the object loaded at `base` with dynamic section `dyn`: true when found.
bool find_in_object(ElfW(Addr) base, const ElfW(Dyn)* dyn, LibcLookup* q) {
  if (!dyn) return false;
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
  if (!symtab || !strtab) return false;
  // Some loaders leave these entries unrelocated: make them absolute.
  auto fix = [&](auto*& p) {
    if (p && reinterpret_cast<ElfW(Addr)>(p) < base)
      p = reinterpret_cast<std::remove_reference_t<decltype(p)>>(reinterpret_cast<ElfW(Addr)>(p) + base);
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
    if (s.st_value == 0 || !same_text(strtab + s.st_name, q->name)) continue;
    if (q->version && versym && verdef) {
      ElfW(Half) ndx = versym[i] & 0x7fff;
      const ElfW(Verdef)* vd = verdef;
      bool match = false;
      for (;;) {
        if (vd->vd_ndx == ndx) {
          auto* aux = reinterpret_cast<const ElfW(Verdaux)*>(reinterpret_cast<const char*>(vd) + vd->vd_aux);
          match = same_text(strtab + aux->vda_name, q->version);
          break;
        }
        if (!vd->vd_next) break;
        vd = reinterpret_cast<const ElfW(Verdef)*>(reinterpret_cast<const char*>(vd) + vd->vd_next);
      }
      if (!match) continue;
    }
    q->result = reinterpret_cast<void*>(base + s.st_value);
    return true;
  }
  return false;
}

// `name` in the object `map` (GLIBC_2.34, else GLIBC_2.2.5, else any version), or null.
void* find_versioned(const link_map* map, const char* name) {
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", nullptr};
  for (const char* const* v = kVersions;; ++v) {
    LibcLookup q{name, *v, nullptr};
    if (find_in_object(map->l_addr, map->l_ld, &q) || !*v) return q.result;
  }
}

// libc's `name`; where libc has none (glibc before 2.34 keeps dlsym in libdl), libdl's.
void* libc_symbol(const char* name) {
  // Volatile read: the loader updates the list; this is what it has now.
  const link_map* first = *static_cast<link_map* const volatile*>(&_r_debug.r_map);
  for (const link_map* m = first; m; m = m->l_next)
    if (m->l_name && contains_text(m->l_name, "/libc.so")) {
      if (void* p = find_versioned(m, name)) return p;
      break;  // not past libc: what follows may be dlopen'ed, and unloaded while this reads it
    }
  for (const link_map* m = first; m; m = m->l_next)
    if (m->l_name && contains_text(m->l_name, "/libdl.so"))
      if (void* p = find_versioned(m, name)) return p;
  return nullptr;
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
