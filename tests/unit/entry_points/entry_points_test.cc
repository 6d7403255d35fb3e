// Which wrapper a (name, version, flags) request selects: checked against the
// toolkit's own cudaTypedefs.h, read here independently of tools/cuda_api.py.
#include <cuda.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "shim/intercept/entry_points.h"

namespace cdsa {
namespace {

// A (name, version, per-thread flag) request and what it selects: the typedef of the wrapper and the symbol it
// exports, nullptr where a row does not check one.
struct Selection {
  const char* name;
  int version;
  bool per_thread;
  const char* pfn;
  const char* symbol;
};

void expect_selections(std::initializer_list<Selection> rows) {
  for (const Selection& r : rows) {
    SCOPED_TRACE(std::string(r.name) + " " + std::to_string(r.version) + (r.per_thread ? " per-thread" : ""));
    int i = select_entry_point(r.name, r.version, r.per_thread);
    if (i < 0) {
      ADD_FAILURE() << "selects no entry point";
      continue;
    }
    if (r.pfn) {
      EXPECT_STREQ(entry_point(i).pfn, r.pfn);
    }
    if (r.symbol) {
      EXPECT_STREQ(entry_point(i).symbol, r.symbol);
    }
  }
}

TEST(EntryPoints, Cuda13SynchronizeAndGetDeviceAreTheContextTakingV2) {
  expect_selections({
      {"cuCtxSynchronize", 13000, false, "PFN_cuCtxSynchronize_v13000", "cuCtxSynchronize_v2"},
      {"cuCtxSynchronize", 13000, true, nullptr, "cuCtxSynchronize_v2"},  // no per-thread variant
      {"cuCtxSynchronize", 12090, false, "PFN_cuCtxSynchronize_v2000", "cuCtxSynchronize"},
      {"cuCtxGetDevice", 13000, false, "PFN_cuCtxGetDevice_v13000", "cuCtxGetDevice_v2"},
  });
}

TEST(EntryPoints, PerThreadFlagPicksThePtszOrPtdsVariant) {
  expect_selections({
      {"cuLaunchKernel", 12000, false, "PFN_cuLaunchKernel_v4000", nullptr},
      {"cuLaunchKernel", 12000, true, "PFN_cuLaunchKernel_v7000_ptsz", "cuLaunchKernel_ptsz"},
      {"cuMemcpyDtoH", 12000, true, "PFN_cuMemcpyDtoH_v7000_ptds", "cuMemcpyDtoH_v2_ptds"},
      {"cuStreamBeginCapture", 12000, true, nullptr, "cuStreamBeginCapture_v2_ptsz"},
      {"cuStreamBeginCapture", 10000, true, nullptr, "cuStreamBeginCapture_ptsz"},
  });
}

TEST(EntryPoints, OlderVersionsGetTheOlderSignature) {
  expect_selections({
      {"cuMemAlloc", 3020, false, "PFN_cuMemAlloc_v3020", "cuMemAlloc_v2"},
      {"cuMemAlloc", 3010, false, "PFN_cuMemAlloc_v2000", "cuMemAlloc"},
      {"cuCtxCreate", 11040, false, nullptr, "cuCtxCreate_v3"},
      {"cuCtxCreate", 13000, false, nullptr, "cuCtxCreate_v4"},
      {"cuGetProcAddress", 12000, false, nullptr, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, false, nullptr, "cuGetProcAddress"},
      // A per-thread request older than the per-thread variant: the plain signature of that version.
      {"cuMemcpyDtoH", 3020, true, "PFN_cuMemcpyDtoH_v3020", nullptr},
  });
}

TEST(EntryPoints, UnknownExemptAndTooOldPassThrough) {
  EXPECT_EQ(select_entry_point("cuNoSuchCall", 13000, false), -1);
  EXPECT_EQ(select_entry_point("", 13000, false), -1);
  EXPECT_EQ(select_entry_point(nullptr, 13000, false), -1);
  EXPECT_EQ(select_entry_point("cuLaunchKerne", 13000, false), -1);      // a prefix of a name
  EXPECT_EQ(select_entry_point("cuLaunchKernelExx", 13000, false), -1);  // a name extended
  for (const char* exempt : {"cuGetErrorString", "cuGetErrorName", "cuDriverGetVersion", "cuGetExportTable"}) {
    EXPECT_EQ(select_entry_point(exempt, 13000, false), -1) << exempt;
    EXPECT_EQ(find_entry_symbol(exempt), -1) << exempt;
    EXPECT_TRUE(is_exempt_entry(exempt)) << exempt;
  }
  EXPECT_FALSE(is_exempt_entry("cuCtxSynchronize"));
  EXPECT_EQ(select_entry_point("cuLaunchKernel", 3020, false), -1);  // before cuLaunchKernel existed
  EXPECT_EQ(find_entry_symbol("cuNoSuchCall"), -1);
  EXPECT_EQ(find_entry_symbol(nullptr), -1);
}

TEST(EntryPoints, EveryEntryIsReachableByItsOwnKeyAndSymbol) {
  std::set<std::string> symbols;
  for (int i = 0; i < entry_point_count(); ++i) {
    const EntryPoint& e = entry_point(i);
    EXPECT_EQ(select_entry_point(e.base, e.version, e.per_thread), i) << e.pfn;
    if (e.symbol[0]) {
      EXPECT_EQ(find_entry_symbol(e.symbol), i) << e.symbol;
      EXPECT_TRUE(symbols.insert(e.symbol).second) << "two entries export " << e.symbol;
      EXPECT_EQ(std::string(e.symbol).rfind(e.base, 0), 0u) << e.symbol << " is not a version of " << e.base;
    }
  }
}

// Every typedef of the toolkit but the exempt ones is an entry, with its version and stream variant.
TEST(EntryPoints, TheTableIsTheToolkitsTypedefs) {
  std::set<std::string> expected;
  std::regex typedef_re(R"(PFN_(cu\w+?)_v(\d+)(_ptsz|_ptds)?\s*\))");
  // The graphics-interop headers this build wraps (CMake: CDSA_INTEROP), comma-separated.
  std::vector<std::string> headers = {"cudaTypedefs.h", "cudaProfilerTypedefs.h"};
  std::stringstream interop(CDSA_INTEROP_HEADERS);
  for (std::string h; std::getline(interop, h, ',');)
    if (!h.empty()) headers.push_back(h);
  for (const std::string& header : headers) {
    std::ifstream in(std::string(CDSA_CUDA_INCLUDE_DIR) + "/" + header);
    ASSERT_TRUE(in) << header;
    std::stringstream ss;
    ss << in.rdbuf();
    // Windows-only entry points (cuWGLGetDevice) are not this platform's.
    std::string text = std::regex_replace(ss.str(), std::regex(R"(#ifdef _WIN32[^#]*#endif)"), "");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), typedef_re); it != std::sregex_iterator(); ++it) {
      std::string base = (*it)[1];
      if (is_exempt_entry(base.c_str())) continue;
      expected.insert("PFN_" + base + "_v" + (*it)[2].str() + (*it)[3].str());
      int i = select_entry_point(base.c_str(), std::stoi((*it)[2]), (*it)[3].length() > 0);
      ASSERT_GE(i, 0) << it->str();
      EXPECT_EQ(entry_point(i).pfn, "PFN_" + base + "_v" + (*it)[2].str() + (*it)[3].str());
    }
  }
  EXPECT_GT(expected.size(), 600u);
  EXPECT_EQ(static_cast<size_t>(entry_point_count()), expected.size());
}

#if CUDA_VERSION >= 13050
// CUDA 13.1-13.5's shapes: new prototypes of old names get their own typedef and the symbol cuda.h declares for it
// (the stub of the 13.0 toolkit has none of them: tools/cuda_api.py takes them from the headers' declarations).
TEST(EntryPoints, The13_5ShapesHaveTheirOwnTypedefsAndSymbols) {
  expect_selections({
      {"cuLaunchHostFunc", 13000, false, "PFN_cuLaunchHostFunc_v10000", "cuLaunchHostFunc"},
      {"cuLaunchHostFunc", 13010, false, "PFN_cuLaunchHostFunc_v13010", "cuLaunchHostFunc_v2"},
      {"cuLaunchHostFunc", 13020, false, "PFN_cuLaunchHostFunc_v13010", "cuLaunchHostFunc_v2"},
      {"cuLaunchHostFunc", 13010, true, "PFN_cuLaunchHostFunc_v13010_ptsz", "cuLaunchHostFunc_v2_ptsz"},
      {"cuMulticastBindMem", 13000, false, "PFN_cuMulticastBindMem_v12010", "cuMulticastBindMem"},
      {"cuMulticastBindMem", 13010, false, "PFN_cuMulticastBindMem_v13010", "cuMulticastBindMem_v2"},
      {"cuMulticastBindAddr", 13010, false, "PFN_cuMulticastBindAddr_v13010", "cuMulticastBindAddr_v2"},
      // 13.4's cuGraphAddNode_v3 has cuGraphAddNode_v2's prototype; cuda.h's macro still names _v2.
      {"cuGraphAddNode", 13030, false, "PFN_cuGraphAddNode_v12030", "cuGraphAddNode_v2"},
      {"cuGraphAddNode", 13041, false, "PFN_cuGraphAddNode_v13040", "cuGraphAddNode_v3"},
      {"cuGraphNodeSetParams", 13040, false, "PFN_cuGraphNodeSetParams_v13040", "cuGraphNodeSetParams_v2"},
      {"cuStreamBeginRecaptureToGraph", 13030, true, "PFN_cuStreamBeginRecaptureToGraph_v13030_ptsz",
       "cuStreamBeginRecaptureToGraph_ptsz"},
      {"cuGraphNodeGetParams", 13020, false, "PFN_cuGraphNodeGetParams_v13020", "cuGraphNodeGetParams"},
  });
  EXPECT_EQ(header_version(), 13050);
  EXPECT_FALSE(is_unknown_driver_symbol("cuLaunchHostFunc_v2"));
}
#endif

// Every exported symbol is a function cuda.h (or cudaProfiler.h) declares: `cuX(`, or the target of a
// `#define cuX cuX_v2` (possibly inside __CUDA_API_PTSZ/PTDS(...), whose _ptsz/_ptds form the driver exports too);
// read here line by line, independently of tools/cuda_api.py's preprocessor.
TEST(EntryPoints, EveryExportedSymbolIsDeclaredByTheHeaders) {
  std::set<std::string> declared;
  const std::regex call(R"(\b(cu\w+)\s*\()");
  const std::regex define(R"(^\s*#\s*define\s+cu\w+\s+(__CUDA_API_PT(SZ|DS)\(\s*)?(cu\w+))");
  for (const char* h : {"/cuda.h", "/cudaProfiler.h"}) {
    std::ifstream in(std::string(CDSA_CUDA_INCLUDE_DIR) + h);
    ASSERT_TRUE(in) << h;
    std::string previous;  // a declaration may put CUresult CUDAAPI on the line before the name
    for (std::string line; std::getline(in, line); previous = line) {
      if (line.find("cu") == std::string::npos) continue;
      std::smatch m;
      if (std::regex_search(line, m, define)) {
        declared.insert(m[3]);
        if (m[1].matched) declared.insert(m[3].str() + "_pt" + (m[2] == "SZ" ? "sz" : "ds"));
      } else if ((line.find("CUDAAPI") != std::string::npos || previous.find("CUDAAPI") != std::string::npos) &&
                 std::regex_search(line, m, call)) {
        declared.insert(m[1]);
      }
    }
  }
  int exported = 0;
  for (int i = 0; i < entry_point_count(); ++i) {
    std::string sym = entry_point(i).symbol;
    if (sym.empty()) continue;
    ++exported;
    // A per-thread name of an old signature (cuMemcpyHtoD_v2_ptds): the driver's build declares it as the plain one.
    std::string plain = std::regex_replace(sym, std::regex("_(ptsz|ptds)$"), "");
    EXPECT_TRUE(declared.count(sym) || (plain != sym && declared.count(plain)))
        << sym << " (" << entry_point(i).pfn << ") is declared by no header";
  }
  EXPECT_GT(exported, 600);
}

// The ceiling (shim/intercept/interpose.cc: wrap_proc_address) asks again at the headers' version; these are its
// inputs: the version, and which exported names dlsym hands back through a thunk.
TEST(EntryPoints, TheHeaderVersionAndTheDriverNamesTheTableDoesNotKnow) {
  EXPECT_EQ(header_version(), CUDA_VERSION);
  for (const char* unknown : {"cuLaunchHostFunc_v9", "cuNoSuchEntryPoint", "cuStreamBeginCaptureToCigX"})
    EXPECT_TRUE(is_unknown_driver_symbol(unknown)) << unknown;
  for (const char* other : std::initializer_list<const char*>{"cuLaunchKernel", "cuCtxSynchronize_v2",  // wrapped
                            "cuGetErrorString", "cuDriverGetVersion",  // exempt
                            "cudaMalloc", "cublasCreate_v2", "cufftPlan1d", "curandCreateGenerator", "cu", "cuda",
                            nullptr})
    EXPECT_FALSE(is_unknown_driver_symbol(other)) << (other ? other : "null");
}

}  // namespace
}  // namespace cdsa
