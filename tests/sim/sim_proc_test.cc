// Unit test of the simulated CUDA driver: cuGetProcAddress, the exports, unimplemented names (sim_proc.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include <regex>
#include <set>

#include "sim_test_support.h"

namespace sim_test {
namespace {

// ======================================================================
// In-process tests (nothing here faults)
// ======================================================================

TEST_F(SimTest, GetProcAddress) {
  // At this toolkit's version (CUDA_VERSION), then older ABIs: the newest signature at or below the version asked for.
  const struct {
    const char* query;
    int version;
    cuuint64_t flags;
    const char* exported;
  } cases[] = {
      {"cuLaunchKernel", CUDA_VERSION, 0, "cuLaunchKernel"},
      {"cuLaunchKernel", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernelEx_ptsz"},
      {"cuMemAlloc", CUDA_VERSION, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2"},
      {"cuMemFree", CUDA_VERSION, 0, "cuMemFree_v2"},
      {"cuMemcpyHtoD", CUDA_VERSION, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyDtoHAsync", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyDtoHAsync_v2_ptsz"},
      {"cuStreamWriteValue32", CUDA_VERSION, 0, "cuStreamWriteValue32_v2"},
      {"cuStreamWriteValue32", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamWriteValue32_v2_ptsz"},
      {"cuStreamWriteValue64", CUDA_VERSION, 0, "cuStreamWriteValue64_v2"},
      {"cuStreamBeginCapture", CUDA_VERSION, 0, "cuStreamBeginCapture_v2"},
      {"cuStreamBeginCapture", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamBeginCapture_v2_ptsz"},
      {"cuStreamDestroy", CUDA_VERSION, 0, "cuStreamDestroy_v2"},
      {"cuEventDestroy", CUDA_VERSION, 0, "cuEventDestroy_v2"},
      {"cuMemHostRegister", CUDA_VERSION, 0, "cuMemHostRegister_v2"},
      {"cuMemHostGetDevicePointer", CUDA_VERSION, 0, "cuMemHostGetDevicePointer_v2"},
      {"cuDevicePrimaryCtxRelease", CUDA_VERSION, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuGraphInstantiate", CUDA_VERSION, 0, "cuGraphInstantiateWithFlags"},
      {"cuGraphLaunch", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuGraphLaunch_ptsz"},
      {"cuGetProcAddress", CUDA_VERSION, 0, "cuGetProcAddress_v2"},
      {"cuStreamQuery", CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuStreamQuery"},
      {"cuStreamSynchronize", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamSynchronize_ptsz"},
      {"cuMemsetD32Async", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemsetD32Async_ptsz"},
      {"cuMemcpy", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpy_ptds"},
      {"cuLaunchHostFunc", 13000, 0, "cuLaunchHostFunc"},
      {"cuCtxPushCurrent", CUDA_VERSION, 0, "cuCtxPushCurrent_v2"},
      {"cuCtxSynchronize", CUDA_VERSION, 0, "cuCtxSynchronize_v2"},
      {"cuCtxGetDevice", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuCtxGetDevice_v2"},
      {"cuStreamBeginCaptureToGraph", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamBeginCaptureToGraph_ptsz"},
      {"cuLibraryGetKernel", CUDA_VERSION, 0, "cuLibraryGetKernel"},
      {"cuKernelGetName", CUDA_VERSION, 0, "cuKernelGetName"},
      {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
      {"cuCtxSynchronize", 12090, 0, "cuCtxSynchronize"},
      {"cuCtxSynchronize", 2000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuCtxSynchronize"},
      {"cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"},
      {"cuCtxGetDevice", 12000, 0, "cuCtxGetDevice"},
      {"cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"},
      {"cuGraphInstantiate", 11080, 0, "cuGraphInstantiate_v2"},
      {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture"},
      {"cuStreamBeginCapture", 10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamBeginCapture_ptsz"},
      {"cuStreamWriteValue32", 11000, 0, "cuStreamWriteValue32"},
      {"cuStreamWriteValue32", 11070, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamWriteValue32_v2_ptsz"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuLaunchKernel", 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuLaunchKernel"},  // no _ptsz before 7000
      {"cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
  };
  void* fn = nullptr;
  for (const auto& c : cases) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    ASSERT_EQ(cuGetProcAddress(c.query, &fn, c.version, c.flags, &status), CUDA_SUCCESS) << c.query << " " << c.version;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    void* want = sym(c.exported);
    ASSERT_NE(want, nullptr) << c.exported << " is not exported";
    EXPECT_EQ(fn, want) << c.query << " at " << c.version << " flags " << c.flags << " should give " << c.exported;
  }
  // Older than the name's first version: CUDA_SUCCESS with NULL (cuda.h), and the status says why.
  for (auto [query, version] : {std::pair{"cuStreamBeginCaptureToGraph", 12020}, std::pair{"cuKernelGetName", 12000},
                                std::pair{"cuCtxSynchronize", 1000}}) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    fn = sym("cuInit");
    EXPECT_EQ(cuGetProcAddress(query, &fn, version, 0, &status), CUDA_SUCCESS) << query;
    EXPECT_EQ(fn, nullptr) << query;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) << query;
  }
  // Exported names are not names cudart asks for: not found (CUDA_SUCCESS with NULL, as cuda.h says).
  for (const char* exported : {"cuMemAlloc_v2", "cuLaunchKernel_ptsz", "cuCtxSynchronize_v2"}) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    fn = sym("cuInit");
    EXPECT_EQ(cuGetProcAddress(exported, &fn, CUDA_VERSION, 0, &status), CUDA_SUCCESS) << exported;
    EXPECT_EQ(fn, nullptr) << exported;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) << exported;
  }

  // Every contract function resolves by its base name.
  const char* contract[] = {"cuInit",
                            "cuDriverGetVersion",
                            "cuDeviceGet",
                            "cuDeviceGetCount",
                            "cuDeviceGetName",
                            "cuDeviceGetAttribute",
                            "cuDevicePrimaryCtxRetain",
                            "cuDevicePrimaryCtxRelease",
                            "cuCtxSetCurrent",
                            "cuCtxGetCurrent",
                            "cuCtxSynchronize",
                            "cuCtxGetId",
                            "cuStreamCreate",
                            "cuStreamDestroy",
                            "cuStreamSynchronize",
                            "cuStreamQuery",
                            "cuStreamGetId",
                            "cuStreamIsCapturing",
                            "cuStreamBeginCapture",
                            "cuStreamEndCapture",
                            "cuGraphInstantiate",
                            "cuGraphLaunch",
                            "cuGraphExecDestroy",
                            "cuGraphDestroy",
                            "cuEventCreate",
                            "cuEventRecord",
                            "cuEventSynchronize",
                            "cuEventQuery",
                            "cuEventDestroy",
                            "cuStreamWaitEvent",
                            "cuMemAlloc",
                            "cuMemFree",
                            "cuMemcpyHtoD",
                            "cuMemcpyDtoH",
                            "cuMemcpyHtoDAsync",
                            "cuMemcpyDtoHAsync",
                            "cuMemHostRegister",
                            "cuMemHostUnregister",
                            "cuMemHostGetDevicePointer",
                            "cuStreamWriteValue32",
                            "cuStreamWriteValue64",
                            "cuModuleLoadData",
                            "cuModuleGetFunction",
                            "cuFuncGetName",
                            "cuLaunchKernel",
                            "cuLaunchKernelEx",
                            "cuGetProcAddress",
                            "cuGetErrorName",
                            "cuGetErrorString",
                            "cuLaunchCooperativeKernel"};
  for (const char* name : contract) {
    for (cuuint64_t flags : {cuuint64_t{0}, cuuint64_t{CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}}) {
      fn = nullptr;
      EXPECT_EQ(cuGetProcAddress(name, &fn, CUDA_VERSION, flags, nullptr), CUDA_SUCCESS) << name;
      EXPECT_NE(fn, nullptr) << name;
    }
  }

  // The returned pointers work.
  fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuDriverGetVersion", &fn, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  int v = 0;
  ASSERT_EQ(reinterpret_cast<CUresult (*)(int*)>(fn)(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, CUDA_VERSION);
  ASSERT_EQ(
      cuGetProcAddress("cuStreamGetId", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
      CUDA_SUCCESS);
  unsigned long long via_ptsz = 0, per_thread = 0;
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUstream, unsigned long long*)>(fn)(nullptr, &via_ptsz), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &per_thread), CUDA_SUCCESS);
  EXPECT_EQ(via_ptsz, per_thread);

  // The _ptsz twin of cuGetProcAddress_v2 defaults to per-thread variants.
  using GPA = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto gpa_ptsz = reinterpret_cast<GPA>(sym("cuGetProcAddress_v2_ptsz"));
  ASSERT_NE(gpa_ptsz, nullptr);
  ASSERT_EQ(gpa_ptsz("cuLaunchKernel", &fn, CUDA_VERSION, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, sym("cuLaunchKernel_ptsz"));

  // Unknown symbols.
  fn = reinterpret_cast<void*>(&v);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, CUDA_VERSION, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(cuGetProcAddress(nullptr, &fn, CUDA_VERSION, 0, &status), CUDA_ERROR_INVALID_VALUE);
}

// cuda.h: a version above the driver's own is refused with CUDA_ERROR_INVALID_VALUE. SIM_CUDA_DRIVER_VERSION sets the
// driver's version; at 13990 the test-only cuLaunchKernel of that version exists, at its own address.
TEST(SimProcTest, VersionsAboveTheDriversAreRefusedAndTheFutureRowIsItsOwnFunction) {
  void* fn = &fn;
  EXPECT_EQ(cuGetProcAddress("cuLaunchKernel", &fn, CUDA_VERSION + 10, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fn, nullptr);
  setenv("SIM_CUDA_DRIVER_VERSION", "13990", 1);
  int v = 0;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 13990);
  ASSERT_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 13990, 0, nullptr), CUDA_SUCCESS);
  EXPECT_NE(fn, nullptr);
  EXPECT_NE(fn, sym("cuLaunchKernel"));
  ASSERT_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 13989, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, sym("cuLaunchKernel"));
  unsetenv("SIM_CUDA_DRIVER_VERSION");
  EXPECT_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 13990, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

#if CUDA_VERSION >= 13050
// The entry points CUDA 13.1-13.5 added or changed, each version at its own address; a driver of 13.0
// (SIM_CUDA_DRIVER_VERSION=13000) has none of them and refuses requests above its version.
TEST(SimProcTest, The13_5RowsAreTheirOwnFunctionsAndAnOlderDriverHidesThem) {
  struct Row {
    const char* name;
    int version;
    cuuint64_t flags;
    const char* exported;
  } rows[] = {
      {"cuLaunchHostFunc", 13000, 0, "cuLaunchHostFunc"},
      {"cuLaunchHostFunc", 13010, 0, "cuLaunchHostFunc_v2"},
      {"cuLaunchHostFunc", 13020, 0, "cuLaunchHostFunc_v2"},
      {"cuLaunchHostFunc", 13010, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchHostFunc_v2_ptsz"},
      {"cuMulticastBindMem", 13000, 0, "cuMulticastBindMem"},
      {"cuMulticastBindMem", 13010, 0, "cuMulticastBindMem_v2"},
      {"cuMulticastBindAddr", 13010, 0, "cuMulticastBindAddr_v2"},
      {"cuGraphAddNode", 13030, 0, "cuGraphAddNode_v2"},
      {"cuGraphAddNode", 13041, 0, "cuGraphAddNode_v3"},
      {"cuGraphNodeSetParams", 13040, 0, "cuGraphNodeSetParams_v2"},
      {"cuStreamBeginRecaptureToGraph", 13030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamBeginRecaptureToGraph_ptsz"},
  };
  std::set<void*> seen;
  for (const Row& r : rows) {
    void* fn = nullptr;
    ASSERT_EQ(cuGetProcAddress(r.name, &fn, r.version, r.flags, nullptr), CUDA_SUCCESS) << r.name << " " << r.version;
    EXPECT_EQ(fn, sym(r.exported)) << r.name << " at " << r.version << " should be " << r.exported;
    ASSERT_NE(fn, nullptr) << r.exported;
    seen.insert(fn);
  }
  EXPECT_EQ(seen.size(), std::size(rows) - 1);  // 13010 and 13020 share cuLaunchHostFunc_v2
  setenv("SIM_CUDA_DRIVER_VERSION", "13000", 1);
  void* fn = &fn;
  EXPECT_EQ(cuGetProcAddress("cuLaunchHostFunc", &fn, 13010, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fn, nullptr);
  ASSERT_EQ(cuGetProcAddress("cuLaunchHostFunc", &fn, 13000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, sym("cuLaunchHostFunc"));
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  ASSERT_EQ(cuGetProcAddress("cuGraphNodeGetParams", &fn, 13000, 0, &status), CUDA_SUCCESS);  // a 13.2 name
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  unsetenv("SIM_CUDA_DRIVER_VERSION");
}
#endif

// SIM_CUDA_PROC_MISSING=error: no function to give is CUDA_ERROR_NOT_FOUND (the sim's earlier answer; which one a
// real driver gives is for the GPU suite), still with NULL and the status; a bad value says so once.
SIM_CHILD_TEST(ProcMissingError) {
  setenv("SIM_CUDA_PROC_MISSING", "error", 1);
  void* fn = &fn;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  CHILD_EQ(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
  CHILD_CHECK(fn == nullptr && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHILD_EQ(cuGetProcAddress("cuKernelGetName", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
  CHILD_CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHILD_EQ(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &st), CUDA_SUCCESS);
  setenv("SIM_CUDA_PROC_MISSING", "maybe", 1);
  Fd2Capture cap;
  CHILD_EQ(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st), CUDA_SUCCESS);
  CHILD_EQ(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st), CUDA_SUCCESS);
  CHILD_STDERR(cap, "simulated CUDA driver: SIM_CUDA_PROC_MISSING=maybe is not null or error; using the default\n");
  child_exit_ok();
}

// Names of the functions an ELF shared library exports, read from its .dynsym.
std::vector<std::string> exported_functions(const char* path) {
  std::vector<std::string> names;
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return names;
  std::vector<char> img;
  char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) img.insert(img.end(), chunk, chunk + got);
  fclose(f);
  auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(img.data());
  auto* sh = reinterpret_cast<const ElfW(Shdr)*>(img.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = img.data() + sh[sh[i].sh_link].sh_offset;
    auto* syms = reinterpret_cast<const ElfW(Sym)*>(img.data() + sh[i].sh_offset);
    for (size_t j = 0; j < sh[i].sh_size / sizeof(ElfW(Sym)); ++j) {
      if (ELF64_ST_TYPE(syms[j].st_info) == STT_FUNC && syms[j].st_shndx != SHN_UNDEF)
        names.emplace_back(strtab + syms[j].st_name);
    }
  }
  return names;
}

std::string sim_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuInit), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The sim exports exactly the cu* functions of the toolkit's stub libcuda.so (plus the few per-thread twins the stub
// lacks), and the entry points of headers newer than the stub, each the newest function of its name; nothing else.
TEST_F(SimTest, ExportsEveryStubName) {
  std::vector<std::string> stub = exported_functions(CDSA_SIM_STUB);
  ASSERT_GT(stub.size(), 500u) << CDSA_SIM_STUB;
  std::vector<std::string> mine = exported_functions(sim_path().c_str());
  std::set<std::string> sim(mine.begin(), mine.end());
  for (const std::string& name : mine) EXPECT_EQ(name.rfind("cu", 0), 0u) << name << " should not be exported";
  size_t cu = 0;
  for (const std::string& name : stub) {
    if (name.rfind("cu", 0) != 0) continue;
    ++cu;
    EXPECT_TRUE(sim.count(name)) << name << " is exported by the stub but not by the sim";
  }
  std::set<std::string> stub_names(stub.begin(), stub.end());
  size_t newer = 0;
  for (const std::string& name : mine) {
    if (stub_names.count(name) || name == "cuGetProcAddress_v2_ptsz") continue;
    ++newer;
    // cuLaunchHostFunc_v2_ptsz: what cuGetProcAddress("cuLaunchHostFunc", CUDA_VERSION, per-thread) answers.
    std::string base = std::regex_replace(name, std::regex("(_v[0-9]+)?(_ptsz|_ptds)?$"), "");
    bool per_thread = name.size() > 5 && (name.ends_with("_ptsz") || name.ends_with("_ptds"));
    void* fn = nullptr;
    EXPECT_EQ(cuGetProcAddress(base.c_str(), &fn, CUDA_VERSION,
                               per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, nullptr),
              CUDA_SUCCESS)
        << name;
    EXPECT_EQ(fn, sym(name.c_str())) << name << " is not the newest " << base;
  }
  // CUDA 13.5's headers over 13.0's stub: 51 (DESIGN.md §13); headers as old as the stub: none.
  if (CUDA_VERSION <= 13000) {  // braces: EXPECT_EQ is an if/else of its own (GCC's -Wdangling-else, an error in CI)
    EXPECT_EQ(newer, 0u);
  }
}

// build/lib/sim-stub/libcuda.so.1, the sim as the stub's own driver: exactly the stub's names, and its version.
TEST(SimProcTest, TheStubsDriverExportsOnlyTheStubsNames) {
  std::vector<std::string> stub = exported_functions(CDSA_SIM_STUB);
  std::vector<std::string> mine = exported_functions(CDSA_SIM_STUB_LIB);
  std::set<std::string> want;
  for (const std::string& n : stub)
    if (n.rfind("cu", 0) == 0) want.insert(n);
  want.insert("cuGetProcAddress_v2_ptsz");
  EXPECT_EQ(std::set<std::string>(mine.begin(), mine.end()), want);
}

// Every base name cuGetProcAddress knows resolves to an exported function of
// that name's family, with and without the per-thread flag.
TEST_F(SimTest, GetProcAddressAnswersFromTheTable) {
  std::vector<std::string> stub = exported_functions(CDSA_SIM_STUB);
  int found = 0;
  for (const std::string& name : stub) {
    for (cuuint64_t flags : {cuuint64_t{0}, cuuint64_t{CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}}) {
      void* fn = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      CUresult r = cuGetProcAddress(name.c_str(), &fn, CUDA_VERSION, flags, &status);
      if (r == CUDA_SUCCESS && fn == nullptr) {  // a versioned or per-thread export, not a base name
        EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) << name;
        continue;
      }
      ASSERT_EQ(r, CUDA_SUCCESS) << name;
      Dl_info info{};
      ASSERT_NE(dladdr(fn, &info), 0) << name;
      ASSERT_NE(info.dli_sname, nullptr) << name;
      std::string got = info.dli_sname;
      EXPECT_TRUE(got.rfind(name, 0) == 0 || (name == "cuGraphInstantiate" && got == "cuGraphInstantiateWithFlags"))
          << name << " resolved to " << got;
      EXPECT_EQ(fn, sym(got.c_str())) << name;
      found += flags == 0;
    }
  }
  EXPECT_GT(found, 400);  // cudaTypedefs.h of CUDA 13.0 names 447
}

// A name the sim does not implement answers 801 once initialised.
TEST_F(SimTest, UnimplementedExportsAnswerNotSupported) {
  for (const char* name : {"cuArrayCreate", "cuTexRefSetAddress_v2", "cuMemPoolCreate", "cuGetExportTable"}) {
    auto fn = reinterpret_cast<CUresult (*)()>(sym(name));
    ASSERT_NE(fn, nullptr) << name;
    EXPECT_EQ(fn(), CUDA_ERROR_NOT_SUPPORTED) << name;
  }
}

// ======================================================================
// Child-process tests
// ======================================================================

// SIM_CUDA_PROC_LOG=<file>: every cuGetProcAddress request, one line each.
SIM_CHILD_TEST(ProcAddressLog) {
  char path[] = "/tmp/sim_test_proclog_XXXXXX";
  int fd = mkstemp(path);
  CHILD_CHECK(fd >= 0);
  close(fd);
  setenv("SIM_CUDA_PROC_LOG", path, 1);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  CHILD_EQ(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &st), CUDA_SUCCESS);
  CHILD_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
           CUDA_SUCCESS);
  CHILD_EQ(cuGetProcAddress("cuKernelGetName", &fn, 12000, 0, &st), CUDA_SUCCESS);
  CHILD_EQ(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st), CUDA_SUCCESS);
  FILE* f = fopen(path, "r");
  CHILD_CHECK(f != nullptr);
  char buf[1024] = {};
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(path);
  std::string want =
      "cuCtxSynchronize 13000 0 -> 0 0 cuCtxSynchronize_v2\n"
      "cuLaunchKernel 12000 2 -> 0 0 cuLaunchKernel_ptsz\n"
      "cuKernelGetName 12000 0 -> 0 2 -\n"
      "cuNoSuch 13000 0 -> 0 1 -\n";
  if (std::string(buf, got) != want) {
    dprintf(g_report_fd, "log:\n%s--- want ---\n%s", buf, want.c_str());
    _exit(1);
  }
  child_exit_ok();
}

}  // namespace
}  // namespace sim_test
