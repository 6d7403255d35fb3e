// Internal to cdsa_symbolizer: run-time binding to elfutils' libdw.so.1.
//
// libdw/libdwfl is never a link-time dependency: the library is opened with
// dlopen(RTLD_NOW | RTLD_LOCAL) on first need and every function is looked up
// with dlsym. The elfutils headers are used only for types and prototypes.
//
// Contract:
//  - dw_api(): thread-safe (loads once, under a function-local static), may
//    allocate on first call, never throws. The returned object lives for the
//    whole process (the library is never dlclose'd).
//  - The libdw functions themselves are NOT thread-safe on a shared Dwfl;
//    callers serialize every libdw call with libdw_mutex().
//  - Which libdw: set_libdw_choice() (native_symbolizer.h) before the first
//    dw_api(): a path to dlopen instead of "libdw.so.1", or none at all.
#pragma once

#include <mutex>
#include <string>

#if CDSA_HAVE_LIBDWFL_H
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#endif

namespace cdsa::symbolizer::internal {

#if CDSA_HAVE_LIBDWFL_H
#define CDSA_DW_FUNCTIONS(X)      \
  X(dwfl_begin)                   \
  X(dwfl_end)                     \
  X(dwfl_errno)                   \
  X(dwfl_errmsg)                  \
  X(dwfl_version)                 \
  X(dwfl_report_begin)            \
  X(dwfl_report_end)              \
  X(dwfl_report_elf)              \
  X(dwfl_linux_proc_report)       \
  X(dwfl_linux_proc_find_elf)     \
  X(dwfl_standard_find_debuginfo) \
  X(dwfl_offline_section_address) \
  X(dwfl_addrmodule)              \
  X(dwfl_module_addrinfo)         \
  X(dwfl_module_getsrc)           \
  X(dwfl_lineinfo)                \
  X(dwfl_module_addrdie)          \
  X(dwfl_module_build_id)         \
  X(dwfl_module_getelf)           \
  X(dwarf_getscopes)              \
  X(dwarf_tag)                    \
  X(dwarf_attr)                   \
  X(dwarf_attr_integrate)         \
  X(dwarf_formstring)             \
  X(dwarf_formudata)              \
  X(dwarf_diename)                \
  X(dwarf_getsrcfiles)            \
  X(dwarf_filesrc)
#endif

struct DwApi {
  bool ok = false;          // every function below resolved
  std::string description;  // one line: which backend and why
#if CDSA_HAVE_LIBDWFL_H
#define CDSA_DW_MEMBER(name) decltype(&::name) name = nullptr;
  CDSA_DW_FUNCTIONS(CDSA_DW_MEMBER)
#undef CDSA_DW_MEMBER
#endif
};

const DwApi& dw_api();

// What set_libdw_choice() (native_symbolizer.h) sets: read by the first dw_api().
void choose_libdw(const char* path, bool disabled);
std::mutex& libdw_mutex();

}  // namespace cdsa::symbolizer::internal
