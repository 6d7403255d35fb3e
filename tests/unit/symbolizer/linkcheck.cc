// A shared library linked like libcdsa.so (static libstdc++, hidden symbols,
// --no-undefined) that pulls in every part of cdsa_symbolizer. A CMake test
// checks with `readelf -d` that it has no libdw/libelf NEEDED entry; the unit
// test dlopens it and calls it.
#include "symbolizer/native_symbolizer.h"

extern "C" __attribute__((visibility("default"))) int cdsa_symtest_linkcheck(void) {
  using namespace cdsa::symbolizer;
  uintptr_t pc = reinterpret_cast<uintptr_t>(&cdsa_symtest_linkcheck);
  std::vector<NativeFrame> live = symbolize_live(&pc, 1, false);
  OfflineSymbolizer offline(capture_module_map());
  std::vector<NativeFrame> off = offline.symbolize(&pc, 1, false);
  if (live.size() != 1 || off.size() != 1) return -1;
  if (live[0].function != "cdsa_symtest_linkcheck" || off[0].function != "cdsa_symtest_linkcheck")
    return -2;
  if (demangle("_ZN3foo3barEi") != "foo::bar(int)") return -3;
  return symbolizer_backend_description().empty() ? -4 : 1;
}
