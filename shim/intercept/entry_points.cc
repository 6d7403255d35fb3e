#include "shim/intercept/entry_points.h"

#include <cuda.h>

namespace cdsa {
namespace {

// Own comparison: the dlsym hook may run this before a sanitizer runtime can serve strcmp.
int compare(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return static_cast<unsigned char>(*a) - static_cast<unsigned char>(*b);
}

enum : int {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol) Index_##pfn,
#define CDSA_EXEMPT_NAME(name)
#define CDSA_WRAP_EXPORT(symbol, pfn, params, args)
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
#undef CDSA_EXEMPT_NAME
#undef CDSA_WRAP_EXPORT
  kCount
};

// Sorted by (base, per_thread, version): the generator's order.
constexpr EntryPoint kEntries[] = {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol) {#pfn, #base, version, per_thread != 0, symbol},
#define CDSA_EXEMPT_NAME(name)
#define CDSA_WRAP_EXPORT(symbol, pfn, params, args)
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
#undef CDSA_EXEMPT_NAME
#undef CDSA_WRAP_EXPORT
};

struct SymbolIndex {
  const char* symbol;
  int index;
};
// Sorted by symbol: the generator's order.
constexpr SymbolIndex kBySymbol[] = {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol)
#define CDSA_EXEMPT_NAME(name)
#define CDSA_WRAP_EXPORT(symbol, pfn, params, args) {#symbol, Index_##pfn},
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
#undef CDSA_EXEMPT_NAME
#undef CDSA_WRAP_EXPORT
};

constexpr const char* kExempt[] = {
#define CDSA_ENTRY(pfn, base, version, per_thread, kind, symbol)
#define CDSA_EXEMPT_NAME(name) #name,
#define CDSA_WRAP_EXPORT(symbol, pfn, params, args)
#include "cuda_entry_points.inc"
#undef CDSA_ENTRY
#undef CDSA_EXEMPT_NAME
#undef CDSA_WRAP_EXPORT
};

}  // namespace

int entry_point_count() noexcept { return kCount; }
const EntryPoint& entry_point(int index) noexcept { return kEntries[index]; }

int select_entry_point(const char* name, int version, bool per_thread) noexcept {
  if (!name) return -1;
  int lo = 0, hi = kCount;  // first entry whose base is not below name
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (compare(kEntries[mid].base, name) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  int best_plain = -1, best_pt = -1;
  for (int i = lo; i < kCount && compare(kEntries[i].base, name) == 0; ++i) {
    if (kEntries[i].version > version) continue;
    (kEntries[i].per_thread ? best_pt : best_plain) = i;  // ascending versions: the last one fits best
  }
  // A call without a per-thread variant (or none that old) has one signature for both flags.
  return per_thread && best_pt >= 0 ? best_pt : best_plain;
}

int find_entry_symbol(const char* symbol) noexcept {
  if (!symbol) return -1;
  int lo = 0, hi = static_cast<int>(sizeof kBySymbol / sizeof kBySymbol[0]);
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    int c = compare(kBySymbol[mid].symbol, symbol);
    if (c == 0) return kBySymbol[mid].index;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

int header_version() noexcept { return CUDA_VERSION; }

bool is_unknown_driver_symbol(const char* symbol) noexcept {
  if (!symbol || symbol[0] != 'c' || symbol[1] != 'u' || symbol[2] < 'A' || symbol[2] > 'Z') return false;
  return find_entry_symbol(symbol) < 0 && !is_exempt_entry(symbol);
}

bool is_exempt_entry(const char* name) noexcept {
  if (!name) return false;
  for (const char* e : kExempt)
    if (!compare(e, name)) return true;
  return false;
}

}  // namespace cdsa
