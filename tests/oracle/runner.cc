// The oracle's C++ runner: executes one program (tests/oracle/README.md) against the simulated driver, as
// runner.py does through ctypes; one op list, two front ends.
//
//   oracle_runner PROGRAM.json
//
// Linked against libcuda.so.1 (the plain entry points are called directly, so a preloaded libcdsa.so interposes
// them as it does a program linked with -lcuda); the _ptsz variants and the older prototypes (cuGraphAddKernelNode's
// v1 parameters, the two-out-parameter cuGraphExecUpdate) are found with dlsym in libcuda.so.1, as ctypes, PyTorch
// and Triton find theirs; some launches go through cuGetProcAddress_v2, as cudart's do. Environment as runner.py's:
// ORACLE_RESULT, ORACLE_LIBCDSA and ORACLE_FAKE_CUPTI (backends inject and cupti). The gate is oracle_support.c,
// linked in. Exit status: 1 when a call returned a sticky fault, else 0.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" {
void oracle_gate_wait(void* id);
void oracle_gate_open(int i);
void oracle_gate_open_all(void);
void* oracle_host_memory(void);
}

namespace {

using json = nlohmann::json;

constexpr CUresult kNotReady = CUDA_ERROR_NOT_READY;
const std::set<int> kSticky = {700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911};
bool soft_code(int r) { return r >= 900 && r <= 910; }

// The variants a program may ask for, found by name in libcuda.so.1.
void* driver_sym(const char* name) {
  static void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void* p = h ? dlsym(h, name) : nullptr;
  if (!p) {
    fprintf(stderr, "oracle_runner: libcuda.so.1 has no %s\n", name);
    exit(3);
  }
  return p;
}
template <class F>
F sym(const char* name) {
  return reinterpret_cast<F>(driver_sym(name));
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using CoopFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**);
using FutureFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**, unsigned);
using StreamFn = CUresult (*)(CUstream);
using EventStreamFn = CUresult (*)(CUevent, CUstream);
using WaitFn = CUresult (*)(CUstream, CUevent, unsigned);
using Write32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
using Write64Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
using HtoDAsyncFn = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
using DtoHAsyncFn = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);
using DtoDAsyncFn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
using MemsetAsyncFn = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);
using HostFuncFn = CUresult (*)(CUstream, CUhostFn, void*);
using FreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);
using AllocAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using AddKernelNode1Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                      const CUDA_KERNEL_NODE_PARAMS_v1*);
using KernelNodeSet1Fn = CUresult (*)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*);
using ExecKernelNodeSet1Fn = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*);
using ExecUpdate1Fn = CUresult (*)(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*);
using AddNode1Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
using CtxCreate2Fn = CUresult (*)(CUcontext*, unsigned, CUdevice);
using CtxSync2Fn = CUresult (*)(CUcontext);
using EmitFn = int (*)(unsigned, int, const char*, const char*, const void*, int);
using InitInjectionFn = int (*)();

// CUPTI's parameter blocks for the launches it reports (generated_cuda_meta.h), as the fake libcupti hands them.
struct LaunchParams {
  CUfunction f;
  unsigned gx, gy, gz, bx, by, bz, shmem;
  CUstream stream;
  void** params;
  void** extra;
};
struct CoopParams {
  CUfunction f;
  unsigned gx, gy, gz, bx, by, bz, shmem;
  CUstream stream;
  void** params;
};
struct ExParams {
  const CUlaunchConfig* config;
  CUfunction f;
  void** params;
  void** extra;
};
struct GraphLaunchParams {
  CUgraphExec exec;
  CUstream stream;
};
constexpr unsigned kCbLaunch[2] = {307, 442}, kCbLaunchEx[2] = {652, 653}, kCbCoop[2] = {477, 478},
                   kCbGraph[2] = {514, 515};
constexpr unsigned kCbBeginCapture = 539, kCbBeginCaptureToGraph = 720, kCbEndCapture = 497;  // _v2, ToGraph, End
// The teardowns, with their enter callbacks as CUPTI makes them: cuCtxDestroy_v2, cuDevicePrimaryCtxRelease_v2,
// cuDevicePrimaryCtxReset_v2 (parameter blocks: the context or the device).
constexpr unsigned kCbCtxDestroy = 322, kCbPrimaryRelease = 544, kCbPrimaryReset = 545;

struct StickyError {
  int code;
};
struct OpFailed {};

long tid() { return static_cast<long>(syscall(SYS_gettid)); }

std::string str(const json& op, const char* key, const char* def = "") {
  return op.contains(key) ? op[key].get<std::string>() : std::string(def);
}

struct Args {  // a kernel's arguments, the cuLaunchKernel way
  CUdeviceptr p0 = 0, p1 = 0;
  int32_t i0 = 0, i1 = 0;
  int64_t l0 = 0;
  float f0 = 0;
  void* ptrs[5] = {};
  int n = 0;
  void** get() { return n ? ptrs : nullptr; }
};

struct Barrier {
  std::mutex mu;
  std::condition_variable cv;
  int parties, arrived = 0;
  long gen = 0;
  bool broken = false;
  explicit Barrier(int n) : parties(n) {}
  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    if (broken) return;
    long g = gen;
    if (++arrived == parties) {
      arrived = 0;
      ++gen;
      cv.notify_all();
      return;
    }
    cv.wait_for(lk, std::chrono::seconds(10), [&] { return gen != g || broken; });
  }
  void abort() {
    std::lock_guard<std::mutex> lk(mu);
    broken = true;
    cv.notify_all();
  }
};

class Runner {
 public:
  explicit Runner(json prog) : prog_(std::move(prog)) {
    backend_ = str(prog_, "backend", "driver");
    reset_end_ = str(prog_, "end") == "reset";
    result_ = {{"runner", "c"},
               {"tids", json::object()},
               {"launches", json::object()},
               {"errors", json::array()},
               {"soft", json::array()},
               {"skipped", json::array()},
               {"sticky", 0},
               {"sticky_op", nullptr},
               {"sticky_call", nullptr},
               {"fault_launched", false},
               {"done", false}};
  }

  void setup();
  int run();
  void write_result();

 private:
  // ---- calls
  int check(int i, const char* name, CUresult r) {
    if (r == CUDA_SUCCESS) return 0;
    std::lock_guard<std::mutex> lk(mu_);
    if (kSticky.count(r) || (r == CUDA_ERROR_DEINITIALIZED && reset_end_)) {
      if (result_["sticky"] == 0) {
        result_["sticky"] = static_cast<int>(r);
        result_["sticky_op"] = i;
        result_["sticky_call"] = name;
      }
      throw StickyError{static_cast<int>(r)};
    }
    json e = {{"op", i}, {"call", name}, {"code", static_cast<int>(r)}};
    (soft_code(r) ? result_["soft"] : result_["errors"]).push_back(e);
    throw OpFailed{};
  }
  // A call CUPTI would report: enter and exit callbacks around it (backend inject), for launches with their
  // parameter block; an ordinary call only at its exit, where a sticky return is what cdsa surfaces.
  // Every call's enter callback goes out: by its name alone cdsa knows a synchronous copy's work, and a work call
  // without its parameter block counts as work it cannot place (front_end.h call_work).
  template <class F>
  int call(int i, const char* name, F&& f, unsigned cbid = 0, const void* params = nullptr) {
    if (emit_) emit_(cbid, 0, name, params ? sym_name_ : nullptr, params, 0);
    CUresult r = f();
    if (emit_) emit_(params ? cbid : 0, 1, name, params ? sym_name_ : nullptr, params, static_cast<int>(r));
    return check(i, name, r);
  }
  // A call with the parameter block CUPTI hands its callbacks (generated_cuda_meta.h's <name>_params): the
  // arguments in order, each at the next multiple of its alignment, as the members of a C struct.
  template <class Fn, class... A>
  int callp(int i, const char* name, Fn fn, A... a) {
    alignas(16) unsigned char block[128] = {};
    size_t at = 0;
    auto put = [&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      at = (at + alignof(T) - 1) / alignof(T) * alignof(T);
      memcpy(block + at, &v, sizeof v);
      at += sizeof v;
    };
    (put(a), ...);
    if (emit_) emit_(0, 0, name, nullptr, block, 0);
    CUresult r = fn(a...);
    if (emit_) emit_(0, 1, name, nullptr, block, static_cast<int>(r));
    return check(i, name, r);
  }
  // Stream capture, with the CUPTI callbacks a real driver makes for it (the runner calls the non-_ptsz names).
  struct CaptureParams {
    CUstream h;
    CUstreamCaptureMode mode;
  };
  struct CaptureToGraphParams {
    CUstream h;
    CUgraph g;
    const CUgraphNode* deps;
    const CUgraphEdgeData* data;
    size_t n;
    CUstreamCaptureMode mode;
  };
  struct EndCaptureParams {
    CUstream h;
    CUgraph* out;
  };
  void begin_capture(int i, CUstream h, CUstreamCaptureMode mode) {
    CaptureParams p{h, mode};
    call(i, "cuStreamBeginCapture_v2", [&] { return cuStreamBeginCapture(h, mode); }, kCbBeginCapture, &p);
  }
  // Not checked: the caller checks, or is already unwinding.
  std::pair<CUresult, CUgraph> end_capture(CUstream h) {
    CUgraph out = nullptr;
    EndCaptureParams p{h, &out};
    if (emit_) emit_(kCbEndCapture, 0, "cuStreamEndCapture", nullptr, &p, 0);
    CUresult r = cuStreamEndCapture(h, &out);
    if (emit_) emit_(kCbEndCapture, 1, "cuStreamEndCapture", nullptr, &p, static_cast<int>(r));
    return {r, out};
  }
  void log(int t, int i, unsigned grid, const char* kind) {
    std::lock_guard<std::mutex> lk(mu_);
    result_["launches"][std::to_string(t)].push_back(json::array({i, grid, kind}));
  }
  void skip(int i) {
    std::lock_guard<std::mutex> lk(mu_);
    result_["skipped"].push_back(i);
  }
  void fault_launched() {
    std::lock_guard<std::mutex> lk(mu_);
    result_["fault_launched"] = true;
  }

  // ---- resources
  void load_modules(const json& order);
  void get_functions(int i, CUmodule m, const json& order, std::map<std::string, CUfunction>* out);
  void make_dev1_objects(int i, const json& names);
  CUdeviceptr alloc(size_t n);
  CUdeviceptr upload(std::vector<int64_t> v);
  CUstream stream(const std::string& ref, bool* ptsz);
  static std::string base(const std::string& k) {
    return k.size() > 4 && k.compare(k.size() - 4, 4, "_bad") == 0 ? k.substr(0, k.size() - 4) : k;
  }
  void args(const json& spec, Args* a);
  void launch(int t, int i, const json& spec, const std::string& sref, const std::string& api);
  void graph_launch(int t, int i, CUgraphExec e, const std::string& sref);
  void memop(int i, const std::string& sref, int bits, const std::string& target, int slot);
  void* proc(const char* name, int version, cuuint64_t flags);
  CUgraphNode graph_node(int i, CUgraph g, size_t idx);
  CUDA_KERNEL_NODE_PARAMS_v1 knode1(const json& spec, Args* a);
  CUDA_KERNEL_NODE_PARAMS knode2(const json& spec, Args* a, bool kern);
  CUgraphNodeParams knode(const json& spec, Args* a);
  CUgraphNode add_kernel_node(int i, CUgraph g, CUgraphNode dep, const json& spec);
  void new_graph(const std::string& name, CUgraph g) { graphs_[name] = {g, ++generation_}; }
  bool exec_node(int i, const json& op, CUgraphExec* e, CUgraphNode* n);

  // ---- ops
  void run_op(int t, int i, const json& op);
  void op_sync(int t, int i, const json& op);
  void op_capture(int t, int i, const json& op);
  void op_build(int t, int i, const json& op);
  void op_cycles(int t, int i, const json& op);
  void op_ctx(int t, int i, const json& op);
  void op_dev_reset(int t, int i, const json& op);
  void set_current(int i, CUcontext c) {
    call(i, "cuCtxSetCurrent", [&] { return cuCtxSetCurrent(c); });
    cur_ = c;
  }
  void poll(int i, const char* name, const std::function<CUresult()>& f);
  void thread_main(int t, const std::vector<std::pair<int, const json*>>& ops);

  json prog_, result_;
  std::string backend_;
  bool reset_end_ = false;
  std::mutex mu_;
  EmitFn emit_ = nullptr;
  LaunchFn fake_launch_ = nullptr;
  thread_local static const char* sym_name_;
  thread_local static CUcontext cur_;  // what this thread made current (the runner's own bookkeeping)
  CUcontext ctx_ = nullptr;
  CUmodule mod_ = nullptr;
  CUlibrary lib_ = nullptr;
  std::map<std::string, CUfunction> funcs_, funcs1_;
  std::vector<CUcontext> ctxs_;
  std::vector<CUdevice> devs_;
  std::vector<int> event_devs_;
  std::vector<CUstream> dev1_;
  CUdeviceptr fillbuf1_ = 0, out1_ = 0, labels1_ = 0;
  std::map<std::string, CUkernel> kernels_;
  std::map<std::string, std::string> names_;
  CUdeviceptr out_ = 0, fillbuf_ = 0, scratch_ = 0, labels_[2] = {}, index_[2] = {};
  // Static (oracle_support.c): work still queued at exit may write them after this object is gone.
  uint64_t* host_ = static_cast<uint64_t*>(oracle_host_memory());
  unsigned char* host_copy_ = static_cast<unsigned char*>(oracle_host_memory()) + 4096;
  std::vector<CUstream> streams_;
  std::vector<CUevent> events_;
  std::map<std::string, CUdeviceptr> blocks_;
  std::set<std::string> freed_;
  std::map<std::string, std::pair<CUgraph, long>> graphs_;
  std::map<std::string, std::pair<CUgraphExec, long>> execs_;
  long generation_ = 0;
  Barrier* barrier_ = nullptr;
};

thread_local const char* Runner::sym_name_ = nullptr;
thread_local CUcontext Runner::cur_ = nullptr;

void Runner::setup() {
  check(-1, "cuInit", cuInit(0));
  if (backend_ == "inject") {
    void* cdsa = dlopen(getenv("ORACLE_LIBCDSA"), RTLD_NOW | RTLD_LOCAL);
    if (!cdsa) {
      fprintf(stderr, "oracle_runner: %s\n", dlerror());
      exit(3);
    }
    reinterpret_cast<InitInjectionFn>(dlsym(cdsa, "InitializeInjection"))();
  }
  if (backend_ == "inject" || backend_ == "cupti") {
    void* fake = dlopen(getenv("ORACLE_FAKE_CUPTI"), RTLD_NOW | RTLD_LOCAL);
    if (!fake) {
      fprintf(stderr, "oracle_runner: %s\n", dlerror());
      exit(3);
    }
    if (backend_ == "inject")
      emit_ = reinterpret_cast<EmitFn>(dlsym(fake, "fake_cupti_emit"));
    else
      fake_launch_ = reinterpret_cast<LaunchFn>(dlsym(fake, "cuLaunchKernel"));  // bound to cdsa's wrapper
  }
  CUdevice dev;
  call(-1, "cuDeviceGet", [&] { return cuDeviceGet(&dev, 0); });
  call(-1, "cuDevicePrimaryCtxRetain", [&] { return cuDevicePrimaryCtxRetain(&ctx_, dev); });
  set_current(-1, ctx_);
  devs_.push_back(dev);
  load_modules(prog_.value("names", json()));
  out_ = alloc(4096);
  fillbuf_ = alloc(256);
  scratch_ = alloc(4096);
  labels_[0] = upload({3, 7, 1, 0});
  labels_[1] = upload({3, 7, 10, 1});
  index_[0] = upload({1, 2, 3, 0});
  index_[1] = upload({1, 2, 1000, 4});
  // The uploads are synchronous copies on the NULL stream, which may still run when they return: the program starts
  // from a synchronized context, so that cdsa has a fact showing they did not fault (README, Ground truth).
  call(-1, "cuCtxSynchronize", [&] { return cuCtxSynchronize(); });
  call(-1, "cuMemHostRegister_v2", [&] { return cuMemHostRegister(host_, 4096, 0); });
  std::vector<int> flags;
  if (prog_.contains("stream_flags"))
    flags = prog_["stream_flags"].get<std::vector<int>>();
  else
    flags.assign(prog_.value("streams", 0), 0);
  for (int f : flags) {
    CUstream s;
    call(-1, "cuStreamCreate", [&] { return cuStreamCreate(&s, static_cast<unsigned>(f)); });
    streams_.push_back(s);
  }
  // Events belong to the context current at cuEventCreate: "event_devs" says each one's device (default 0).
  event_devs_.assign(prog_.value("events", 0), 0);
  if (prog_.contains("event_devs")) event_devs_ = prog_["event_devs"].get<std::vector<int>>();
  events_.assign(event_devs_.size(), nullptr);
  for (size_t k = 0; k < events_.size(); ++k)
    if (event_devs_[k] == 0) call(-1, "cuEventCreate", [&] { return cuEventCreate(&events_[k], 0); });
  ctxs_.push_back(ctx_);
  if (prog_.value("devices", 1) > 1) {  // device 1's primary context, its module, buffers, streams and events
    CUdevice dev1;
    CUcontext ctx1;
    call(-1, "cuDeviceGet", [&] { return cuDeviceGet(&dev1, 1); });
    call(-1, "cuDevicePrimaryCtxRetain", [&] { return cuDevicePrimaryCtxRetain(&ctx1, dev1); });
    devs_.push_back(dev1);
    ctxs_.push_back(ctx1);
    set_current(-1, ctx1);
    fillbuf1_ = alloc(256);
    out1_ = alloc(64);
    labels1_ = upload({3, 7, 1, 0});
    call(-1, "cuCtxSynchronize", [&] { return cuCtxSynchronize(); });
    make_dev1_objects(-1, prog_.value("dev1_names", json()));
    set_current(-1, ctx_);
  }
  for (int k = 0; k < prog_.value("blocks", 0); ++k) {
    CUdeviceptr d = 0;
    auto fn = sym<AllocAsyncFn>("cuMemAllocAsync");
    call(-1, "cuMemAllocAsync", [&] { return fn(&d, 64, nullptr); });
    blocks_["a" + std::to_string(k)] = d;
  }
}

// The kernels by short name; `order` (a list of short names, default all five) is the order the functions are
// got in: the sim hands a freed handle's address to the next one made (tests/sim/README.md), so the order decides
// which old name each new function's address had.
const std::vector<std::pair<std::string, std::string>>& kernel_names() {
  static const std::vector<std::pair<std::string, std::string>> k = {
      {"fill", "fill_f32"},
      {"sleep", "sleep_us"},
      {"nll", "nll_loss_forward_reduce_cuda_kernel_2d"},
      {"index", "indexSelectSmallIndex"},
      {"illegal", "illegal_address"}};
  return k;
}

std::vector<std::string> name_order(const json& order) {
  std::vector<std::string> out;
  if (order.is_array())
    for (const auto& n : order) out.push_back(n.get<std::string>());
  for (const auto& [shortname, name] : kernel_names())
    if (std::find(out.begin(), out.end(), shortname) == out.end()) out.push_back(shortname);
  return out;
}

std::string long_name(const std::string& shortname) {
  for (const auto& [s, name] : kernel_names())
    if (s == shortname) return name;
  return shortname;
}

void Runner::get_functions(int i, CUmodule m, const json& order, std::map<std::string, CUfunction>* out) {
  for (const auto& shortname : name_order(order)) {
    CUfunction f;
    std::string name = long_name(shortname);
    call(i, "cuModuleGetFunction", [&] { return cuModuleGetFunction(&f, m, name.c_str()); });
    (*out)[shortname] = f;
  }
}

void Runner::load_modules(const json& order) {
  call(-1, "cuModuleLoadData", [&] { return cuModuleLoadData(&mod_, "image"); });
  call(-1, "cuLibraryLoadData",
       [&] { return cuLibraryLoadData(&lib_, "fatbin", nullptr, nullptr, 0, nullptr, nullptr, 0); });
  get_functions(-1, mod_, order, &funcs_);
  for (const auto& shortname : name_order(order)) {
    CUkernel k;
    std::string name = long_name(shortname);
    call(-1, "cuLibraryGetKernel", [&] { return cuLibraryGetKernel(&k, lib_, name.c_str()); });
    kernels_[shortname] = k;
    names_[shortname] = name;
  }
}

// Device 1's module, functions (in `names` order), streams and events, made with its primary context current
// (at setup, and again after its reset or last release).
void Runner::make_dev1_objects(int i, const json& names) {
  CUmodule mod1;
  call(i, "cuModuleLoadData", [&] { return cuModuleLoadData(&mod1, "image"); });
  get_functions(i, mod1, names, &funcs1_);
  dev1_.assign(prog_.value("dev1_streams", 1), nullptr);
  for (auto& s : dev1_) call(i, "cuStreamCreate", [&] { return cuStreamCreate(&s, 0); });
  for (size_t k = 0; k < events_.size(); ++k)
    if (event_devs_[k] == 1) call(i, "cuEventCreate", [&] { return cuEventCreate(&events_[k], 0); });
}

CUdeviceptr Runner::alloc(size_t n) {
  CUdeviceptr d = 0;
  call(-1, "cuMemAlloc_v2", [&] { return cuMemAlloc(&d, n); });
  return d;
}

CUdeviceptr Runner::upload(std::vector<int64_t> v) {
  CUdeviceptr d = alloc(v.size() * 8);
  call(-1, "cuMemcpyHtoD_v2", [&] { return cuMemcpyHtoD(d, v.data(), v.size() * 8); });
  return d;
}

CUstream Runner::stream(const std::string& ref, bool* ptsz) {
  *ptsz = false;
  if (ref == "null") return nullptr;
  if (ref == "legacy") return CU_STREAM_LEGACY;
  if (ref == "pt") return CU_STREAM_PER_THREAD;
  if (ref == "ptsz") {
    *ptsz = true;
    return nullptr;
  }
  if (ref[0] == 'x') return dev1_.at(std::stoul(ref.substr(1)));
  return streams_.at(std::stoul(ref.substr(1)));
}

void Runner::args(const json& spec, Args* a) {
  std::string k = spec["k"];
  bool dev1 = spec.value("dev", 0) == 1;
  if (k == "fill") {
    a->p0 = dev1 ? fillbuf1_ : fillbuf_, a->i0 = 16, a->f0 = 1.0f;
    a->ptrs[0] = &a->p0, a->ptrs[1] = &a->i0, a->ptrs[2] = &a->f0, a->n = 3;
  } else if (k == "sleep") {
    a->l0 = spec.value("us", 100);
    a->ptrs[0] = &a->l0, a->n = 1;
  } else if (k == "nll" || k == "nll_bad") {
    // Memory is one address space (tests/sim/README.md): device 1's bad labels are device 0's.
    a->p0 = dev1 ? out1_ : out_, a->p1 = k == "nll_bad" ? labels_[1] : dev1 ? labels1_ : labels_[0], a->i0 = 4;
    a->i1 = 10;
    a->l0 = -100;
    a->ptrs[0] = &a->p0, a->ptrs[1] = &a->p1, a->ptrs[2] = &a->i0, a->ptrs[3] = &a->i1, a->ptrs[4] = &a->l0;
    a->n = 5;
  } else if (k == "index" || k == "index_bad") {
    a->p0 = out_ + 1024, a->p1 = index_[k == "index_bad"], a->i0 = 4, a->i1 = 1000;
    a->ptrs[0] = &a->p0, a->ptrs[1] = &a->p1, a->ptrs[2] = &a->i0, a->ptrs[3] = &a->i1, a->n = 4;
  } else {
    a->n = 0;
  }
}

void* Runner::proc(const char* name, int version, cuuint64_t flags) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  call(-1, "cuGetProcAddress_v2", [&] { return cuGetProcAddress(name, &fn, version, flags, &status); });
  return fn;
}

void Runner::launch(int t, int i, const json& spec, const std::string& sref, const std::string& api) {
  const std::string k = spec["k"];
  const std::string b = base(k);
  unsigned grid = spec["grid"];
  CUfunction f = api == "lib" ? reinterpret_cast<CUfunction>(kernels_.at(b)) : funcs_.at(b);
  Args a;
  if (sref[0] == 'x') {  // device 1: its own module's function, its own buffers
    f = funcs1_.at(b);
    json on1 = spec;
    on1["dev"] = 1;
    args(on1, &a);
  } else {
    args(spec, &a);
  }
  bool ptsz;
  CUstream h = stream(sref, &ptsz);
  sym_name_ = names_.at(b).c_str();
  if (api == "lk" || api == "lib" || api == "proc") {
    LaunchFn fn = ptsz ? sym<LaunchFn>("cuLaunchKernel_ptsz") : &cuLaunchKernel;
    if (api == "proc") fn = reinterpret_cast<LaunchFn>(proc("cuLaunchKernel", 12000, ptsz ? 2 : 0));
    if (backend_ == "cupti" && !ptsz && api == "lk") fn = fake_launch_;
    LaunchParams lp{f, grid, 1, 1, 32, 1, 1, 0, h, a.get(), nullptr};
    call(
        i, ptsz ? "cuLaunchKernel_ptsz" : "cuLaunchKernel",
        [&] { return fn(f, grid, 1, 1, 32, 1, 1, 0, h, a.get(), nullptr); }, kCbLaunch[ptsz], &lp);
  } else if (api == "lkx" || api == "pdl") {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid, cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = h;
    if (api == "pdl") cfg.attrs = &attr, cfg.numAttrs = 1;
    LaunchExFn fn = ptsz ? sym<LaunchExFn>("cuLaunchKernelEx_ptsz") : &cuLaunchKernelEx;
    ExParams ep{&cfg, f, a.get(), nullptr};
    call(
        i, ptsz ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx", [&] { return fn(&cfg, f, a.get(), nullptr); },
        kCbLaunchEx[ptsz], &ep);
  } else if (api == "coop") {
    CoopFn fn = ptsz ? sym<CoopFn>("cuLaunchCooperativeKernel_ptsz") : &cuLaunchCooperativeKernel;
    CoopParams cp{f, grid, 1, 1, 32, 1, 1, 0, h, a.get()};
    call(
        i, ptsz ? "cuLaunchCooperativeKernel_ptsz" : "cuLaunchCooperativeKernel",
        [&] { return fn(f, grid, 1, 1, 32, 1, 1, 0, h, a.get()); }, kCbCoop[ptsz], &cp);
  } else if (api == "thunk") {
    auto fn = reinterpret_cast<FutureFn>(proc("cuLaunchKernel", 13990, 0));
    call(i, "cuLaunchKernel@13990", [&] { return fn(f, grid, 1, 1, 32, 1, 1, 0, h, a.get(), nullptr, 13990); });
    return;  // cdsa can only pass it through: in no record
  } else {
    fprintf(stderr, "oracle_runner: unknown api %s\n", api.c_str());
    exit(3);
  }
  log(t, i, grid, "k");
}

void Runner::graph_launch(int t, int i, CUgraphExec e, const std::string& sref) {
  bool ptsz;
  CUstream h = stream(sref, &ptsz);
  sym_name_ = nullptr;
  GraphLaunchFn fn = ptsz ? sym<GraphLaunchFn>("cuGraphLaunch_ptsz") : &cuGraphLaunch;
  GraphLaunchParams gp{e, h};
  call(
      i, ptsz ? "cuGraphLaunch_ptsz" : "cuGraphLaunch", [&] { return fn(e, h); }, kCbGraph[ptsz], &gp);
  log(t, i, 0, "g");
}

void Runner::memop(int i, const std::string& sref, int bits, const std::string& target, int slot) {
  bool ptsz;
  CUstream h = stream(sref, &ptsz);
  CUdeviceptr addr;
  if (target == "host")
    addr = reinterpret_cast<CUdeviceptr>(&host_[slot % 512]);
  else if (target == "dev")
    addr = scratch_ + 8 * (slot % 512);
  else
    addr = blocks_.at(target);
  if (bits == 64) {
    const char* name = ptsz ? "cuStreamWriteValue64_v2_ptsz" : "cuStreamWriteValue64_v2";
    auto fn = ptsz ? sym<Write64Fn>(name) : &cuStreamWriteValue64;
    callp(i, name, fn, h, addr, static_cast<cuuint64_t>(slot + 1), 0u);
  } else {
    const char* name = ptsz ? "cuStreamWriteValue32_v2_ptsz" : "cuStreamWriteValue32_v2";
    auto fn = ptsz ? sym<Write32Fn>(name) : &cuStreamWriteValue32;
    callp(i, name, fn, h, addr, static_cast<cuuint32_t>(slot + 1), 0u);
  }
}

void Runner::poll(int i, const char* name, const std::function<CUresult()>& f) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    CUresult r = f();
    if (emit_) emit_(0, 1, name, nullptr, nullptr, static_cast<int>(r));
    if (r != kNotReady) {
      check(i, name, r);
      return;
    }
    if (std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Runner::op_sync(int, int i, const json& op) {
  std::string how = op["how"];
  bool ptsz = false;
  CUstream h = op.contains("s") ? stream(op["s"], &ptsz) : nullptr;
  if (how == "ctx") {
    call(i, "cuCtxSynchronize", [&] { return cuCtxSynchronize(); });
  } else if (how == "ctx_v2") {
    auto fn = reinterpret_cast<CtxSync2Fn>(proc("cuCtxSynchronize", 13000, 0));
    CUcontext c = op.contains("c") ? ctxs_.at(op["c"].get<size_t>()) : nullptr;  // NULL: the current one
    callp(i, "cuCtxSynchronize_v2", fn, c);
  } else if (how == "stream") {
    auto fn = ptsz ? sym<StreamFn>("cuStreamSynchronize_ptsz") : &cuStreamSynchronize;
    callp(i, ptsz ? "cuStreamSynchronize_ptsz" : "cuStreamSynchronize", fn, h);
  } else if (how == "stream_query") {
    auto fn = ptsz ? sym<StreamFn>("cuStreamQuery_ptsz") : &cuStreamQuery;
    poll(i, ptsz ? "cuStreamQuery_ptsz" : "cuStreamQuery", [&] { return fn(h); });
  } else if (how == "event" || how == "event_query") {
    CUevent ev = events_.at(op["e"].get<size_t>());
    auto rec = ptsz ? sym<EventStreamFn>("cuEventRecord_ptsz") : &cuEventRecord;
    if (op.value("rec", true))  // else recorded by an earlier op (maybe with another context current)
      callp(i, ptsz ? "cuEventRecord_ptsz" : "cuEventRecord", rec, ev, h);
    if (how == "event")
      call(i, "cuEventSynchronize", [&] { return cuEventSynchronize(ev); });
    else
      poll(i, "cuEventQuery", [&] { return cuEventQuery(ev); });
  } else if (how == "dtoh") {
    call(i, "cuMemcpyDtoH_v2", [&] { return cuMemcpyDtoH(host_copy_, scratch_, 64); });
  } else if (how == "htod") {
    call(i, "cuMemcpyHtoD_v2", [&] { return cuMemcpyHtoD(scratch_, host_copy_, 64); });
  } else if (how == "memset") {
    call(i, "cuMemsetD8_v2", [&] { return cuMemsetD8(scratch_ + 64, 0, 64); });
  } else if (how == "free") {
    CUdeviceptr d = 0;
    call(i, "cuMemAlloc_v2", [&] { return cuMemAlloc(&d, 64); });
    call(i, "cuMemFree_v2", [&] { return cuMemFree(d); });
  }
}

CUDA_KERNEL_NODE_PARAMS_v1 Runner::knode1(const json& spec, Args* a) {
  args(spec, a);
  CUDA_KERNEL_NODE_PARAMS_v1 p{};
  p.func = funcs_.at(base(spec["k"]));
  p.gridDimX = spec["grid"], p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = a->get();
  return p;
}

CUDA_KERNEL_NODE_PARAMS Runner::knode2(const json& spec, Args* a, bool kern) {
  args(spec, a);
  CUDA_KERNEL_NODE_PARAMS p{};
  const std::string b = base(spec["k"]);
  if (kern)
    p.kern = kernels_.at(b);
  else
    p.func = funcs_.at(b);
  p.gridDimX = spec["grid"], p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = a->get();
  return p;
}

CUgraphNodeParams Runner::knode(const json& spec, Args* a) {
  CUgraphNodeParams np{};
  np.type = CU_GRAPH_NODE_TYPE_KERNEL;
  CUDA_KERNEL_NODE_PARAMS k2 = knode2(spec, a, false);
  static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS));
  memcpy(&np.kernel, &k2, sizeof k2);
  return np;
}

CUgraphNode Runner::add_kernel_node(int i, CUgraph g, CUgraphNode dep, const json& spec) {
  CUgraphNode n = nullptr;
  const CUgraphNode* deps = dep ? &dep : nullptr;
  size_t nd = dep ? 1 : 0;
  std::string how = str(spec, "how", "v2");
  Args a;
  if (how == "v1") {
    auto p = knode1(spec, &a);
    auto fn = sym<AddKernelNode1Fn>("cuGraphAddKernelNode");
    call(i, "cuGraphAddKernelNode", [&] { return fn(&n, g, deps, nd, &p); });
  } else if (how == "v2" || how == "kern") {
    auto p = knode2(spec, &a, how == "kern");
    call(i, "cuGraphAddKernelNode_v2", [&] { return cuGraphAddKernelNode(&n, g, deps, nd, &p); });
  } else if (how == "node") {
    auto np = knode(spec, &a);
    auto fn = sym<AddNode1Fn>("cuGraphAddNode");
    call(i, "cuGraphAddNode", [&] { return fn(&n, g, deps, nd, &np); });
  } else {
    auto np = knode(spec, &a);
    call(i, "cuGraphAddNode_v2", [&] { return cuGraphAddNode(&n, g, deps, nullptr, nd, &np); });
  }
  return n;
}

CUgraphNode Runner::graph_node(int i, CUgraph g, size_t idx) {
  size_t count = 0;
  call(i, "cuGraphGetNodes", [&] { return cuGraphGetNodes(g, nullptr, &count); });
  if (idx >= count) return nullptr;
  std::vector<CUgraphNode> nodes(count);
  call(i, "cuGraphGetNodes", [&] { return cuGraphGetNodes(g, nodes.data(), &count); });
  CUgraphNodeType type;
  call(i, "cuGraphNodeGetType", [&] { return cuGraphNodeGetType(nodes[idx], &type); });
  return type == CU_GRAPH_NODE_TYPE_KERNEL ? nodes[idx] : nullptr;
}

bool Runner::exec_node(int i, const json& op, CUgraphExec* e, CUgraphNode* n) {
  auto x = execs_.find(op["exec"]);
  auto g = graphs_.find(op["src"]);
  if (x == execs_.end() || g == graphs_.end() || x->second.second != g->second.second) return false;
  *e = x->second.first;
  *n = graph_node(i, g->second.first, op["idx"].get<size_t>());
  return *n != nullptr;
}

void Runner::op_capture(int t, int i, const json& op) {
  std::string name = op["graph"];
  if (graphs_.count(name)) return skip(i);
  bool ptsz;
  CUstream h = stream(op["s"], &ptsz);
  auto mode = static_cast<CUstreamCaptureMode>(op.value("mode", 0));
  CUgraph g = nullptr;
  if (op.value("to_graph", false)) {
    call(i, "cuGraphCreate", [&] { return cuGraphCreate(&g, 0); });
    CaptureToGraphParams p{h, g, nullptr, nullptr, 0, mode};
    call(i, "cuStreamBeginCaptureToGraph",
         [&] { return cuStreamBeginCaptureToGraph(h, g, nullptr, nullptr, 0, mode); }, kCbBeginCaptureToGraph, &p);
  } else {
    begin_capture(i, h, mode);
  }
  auto end = [&] { return end_capture(h); };
  try {
    for (const auto& item : op["body"]) {
      if (item.contains("k"))
        launch(t, i, item, op["s"], "lk");
      else if (item["node"] == "memop")
        memop(i, op["s"], 32, "host", 500);
      else
        callp(i, "cuMemcpyDtoDAsync_v2", &cuMemcpyDtoDAsync, scratch_ + 1024, scratch_ + 2048, size_t{64}, h);
    }
  } catch (...) {
    end();
    throw;
  }
  auto [r, out] = end();
  check(i, "cuStreamEndCapture", r);
  new_graph(name, out);
}

void Runner::op_build(int, int i, const json& op) {
  std::string name = op["graph"];
  if (graphs_.count(name)) return skip(i);
  CUgraph g = nullptr;
  call(i, "cuGraphCreate", [&] { return cuGraphCreate(&g, 0); });
  new_graph(name, g);
  CUgraphNode dep = nullptr;
  for (const auto& item : op["nodes"]) {
    const CUgraphNode* deps = dep ? &dep : nullptr;
    size_t nd = dep ? 1 : 0;
    CUgraphNode n = nullptr;
    if (item.contains("k")) {
      n = add_kernel_node(i, g, dep, item);
    } else if (item.contains("child")) {
      auto c = graphs_.find(item["child"]);
      if (c == graphs_.end()) continue;
      CUgraph child = c->second.first;
      const std::string how = str(item, "how");
      if (how == "node" || how == "move") {
        const bool move = how == "move";
        CUgraphNodeParams np{};
        np.type = CU_GRAPH_NODE_TYPE_GRAPH;
        np.graph.graph = child;
        np.graph.ownership = move ? CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE : CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE;
        auto fn = sym<AddNode1Fn>("cuGraphAddNode");
        call(i, "cuGraphAddNode", [&] { return fn(&n, g, deps, nd, &np); });
        if (move) graphs_.erase(c);  // the parent owns it now: destroyed with it, never on its own
      } else {
        call(i, "cuGraphAddChildGraphNode", [&] { return cuGraphAddChildGraphNode(&n, g, deps, nd, child); });
      }
    } else if (item["node"] == "empty") {
      call(i, "cuGraphAddEmptyNode", [&] { return cuGraphAddEmptyNode(&n, g, deps, nd); });
    } else {
      CUDA_MEMSET_NODE_PARAMS mp{};
      mp.dst = scratch_ + 3584, mp.value = 0, mp.elementSize = 1, mp.width = 64, mp.height = 1;
      call(i, "cuGraphAddMemsetNode", [&] { return cuGraphAddMemsetNode(&n, g, deps, nd, &mp, ctx_); });
    }
    dep = n;
  }
}

void Runner::op_cycles(int t, int i, const json& op) {
  bool ptsz;
  CUstream h = stream(op["s"], &ptsz);
  json spec = {{"k", "fill"}, {"grid", op["grid"]}, {"how", "v2"}};
  bool capture = str(op, "how") == "capture";
  int n = op["n"];
  for (int c = 0; c < n; ++c) {
    CUgraph g = nullptr;
    CUgraphExec e = nullptr;
    if (capture) {
      begin_capture(i, h, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
      try {
        launch(t, i, spec, op["s"], "lk");
      } catch (...) {
        end_capture(h);
        throw;
      }
      auto [r, out] = end_capture(h);
      g = out;
      check(i, "cuStreamEndCapture", r);
    } else {
      call(i, "cuGraphCreate", [&] { return cuGraphCreate(&g, 0); });
      add_kernel_node(i, g, nullptr, spec);
    }
    call(i, "cuGraphInstantiateWithFlags", [&] { return cuGraphInstantiateWithFlags(&e, g, 0); });
    graph_launch(t, i, e, op["s"]);
    call(i, "cuGraphExecDestroy", [&] { return cuGraphExecDestroy(e); });
    call(i, "cuGraphDestroy", [&] { return cuGraphDestroy(g); });
  }
}

// A created context (cuCtxCreate_v2 on device `d`, pushed current) with its own module and functions (in
// `names` order: they take the addresses the last teardown freed), a stream and one launch of `k` in it. Good work:
// synchronized, then the stream and the context destroyed (its functions freed for the next ones). The fault
// (`fault`): surfaced by `surface` — "stream" (cuStreamSynchronize), "ctx" (cuCtxSynchronize, it current),
// "ctx_v2" (cuCtxSynchronize_v2 of it with the previous context current again), "event" / "event_query" (an event
// of it recorded on its stream, waited for or polled with the previous context current), "exit" (the previous
// context current again, nothing waits: the context lives on, its fault unobserved by the program).
void Runner::op_ctx(int t, int i, const json& op) {
  CUcontext prev = cur_;
  CUcontext ctx2 = nullptr;
  CUdevice dev = devs_.at(op.value("d", 0));
  auto create = sym<CtxCreate2Fn>("cuCtxCreate_v2");
  call(i, "cuCtxCreate_v2", [&] { return create(&ctx2, 0, dev); });
  cur_ = ctx2;
  CUmodule m2 = nullptr;
  std::map<std::string, CUfunction> f2;
  call(i, "cuModuleLoadData", [&] { return cuModuleLoadData(&m2, "image"); });
  get_functions(i, m2, op.value("names", json()), &f2);
  CUstream s;
  call(i, "cuStreamCreate", [&] { return cuStreamCreate(&s, 0); });
  const std::string k = str(op, "k", "fill");
  Args a;
  args(op, &a);
  CUfunction f = f2.at(base(k));
  unsigned grid = op["grid"];
  sym_name_ = names_.at(base(k)).c_str();
  LaunchFn fn = backend_ == "cupti" ? fake_launch_ : &cuLaunchKernel;
  LaunchParams lp{f, grid, 1, 1, 32, 1, 1, 0, s, a.get(), nullptr};
  call(
      i, "cuLaunchKernel", [&] { return fn(f, grid, 1, 1, 32, 1, 1, 0, s, a.get(), nullptr); }, kCbLaunch[0], &lp);
  log(t, i, grid, "k");
  if (!op.value("fault", false)) {
    callp(i, "cuStreamSynchronize", &cuStreamSynchronize, s);
    callp(i, "cuStreamDestroy_v2", &cuStreamDestroy, s);
    call(i, "cuCtxDestroy_v2", [&] { return cuCtxDestroy(ctx2); }, kCbCtxDestroy, &ctx2);  // pops it
    set_current(i, prev);
    return;
  }
  fault_launched();
  const std::string how = str(op, "surface", "stream");
  if (how == "stream") {
    callp(i, "cuStreamSynchronize", &cuStreamSynchronize, s);
  } else if (how == "ctx") {
    call(i, "cuCtxSynchronize", [&] { return cuCtxSynchronize(); });
  } else if (how == "ctx_v2") {
    set_current(i, prev);
    auto sync2 = reinterpret_cast<CtxSync2Fn>(proc("cuCtxSynchronize", 13000, 0));
    callp(i, "cuCtxSynchronize_v2", sync2, ctx2);
  } else if (how == "event" || how == "event_query") {
    CUevent ev;
    call(i, "cuEventCreate", [&] { return cuEventCreate(&ev, 0); });
    callp(i, "cuEventRecord", &cuEventRecord, ev, s);
    set_current(i, prev);
    if (how == "event")
      call(i, "cuEventSynchronize", [&] { return cuEventSynchronize(ev); });
    else
      poll(i, "cuEventQuery", [&] { return cuEventQuery(ev); });
  } else {
    set_current(i, prev);
  }
}

// Device d's primary context torn down (cuDevicePrimaryCtxReset_v2, or cuDevicePrimaryCtxRelease_v2 of the
// setup's one retain), retained again (a new incarnation, the same handle), and its module, functions (in `names`
// order: the freed addresses come back under other names), streams and events made again.
void Runner::op_dev_reset(int, int i, const json& op) {
  CUcontext prev = cur_;
  size_t d = op.value("d", 1);
  CUdevice dev = devs_.at(d);
  CUcontext c = nullptr;
  if (str(op, "how", "reset") == "release")
    call(i, "cuDevicePrimaryCtxRelease_v2", [&] { return cuDevicePrimaryCtxRelease(dev); }, kCbPrimaryRelease, &dev);
  else
    call(i, "cuDevicePrimaryCtxReset_v2", [&] { return cuDevicePrimaryCtxReset(dev); }, kCbPrimaryReset, &dev);
  call(i, "cuDevicePrimaryCtxRetain", [&] { return cuDevicePrimaryCtxRetain(&c, dev); });
  ctxs_.at(d) = c;
  set_current(i, c);
  make_dev1_objects(i, op.value("names", json()));
  set_current(i, prev);  // the primary context's handle is the same across resets
}

void Runner::run_op(int t, int i, const json& op) {
  const std::string kind = op["op"];
  bool ptsz = false;
  if (kind == "launch") {
    launch(t, i, op, op["s"], str(op, "api", "lk"));
    if (op.value("fault", false)) fault_launched();
  } else if (kind == "burst") {
    int n = op["n"], bad_at = op.value("bad_at", -1), g0 = op["grid"];
    for (int j = 0; j < n; ++j) {
      json spec = {{"k", j == bad_at ? op["bad"] : op["k"]}, {"grid", g0 + j}};
      launch(t, i, spec, op["s"], str(op, "api", "lk"));
      if (j == bad_at) fault_launched();
    }
  } else if (kind == "record") {
    CUstream h = stream(op["s"], &ptsz);
    auto fn = ptsz ? sym<EventStreamFn>("cuEventRecord_ptsz") : &cuEventRecord;
    callp(i, ptsz ? "cuEventRecord_ptsz" : "cuEventRecord", fn, events_.at(op["e"].get<size_t>()), h);
  } else if (kind == "wait") {
    CUstream h = stream(op["s"], &ptsz);
    auto fn = ptsz ? sym<WaitFn>("cuStreamWaitEvent_ptsz") : &cuStreamWaitEvent;
    callp(i, ptsz ? "cuStreamWaitEvent_ptsz" : "cuStreamWaitEvent", fn, h, events_.at(op["e"].get<size_t>()), 0u);
  } else if (kind == "sync") {
    op_sync(t, i, op);
  } else if (kind == "copy") {
    CUstream h = stream(op["s"], &ptsz);
    std::string d = op["dir"];
    if (d == "htod") {
      auto fn = ptsz ? sym<HtoDAsyncFn>("cuMemcpyHtoDAsync_v2_ptsz") : &cuMemcpyHtoDAsync;
      callp(i, ptsz ? "cuMemcpyHtoDAsync_v2_ptsz" : "cuMemcpyHtoDAsync_v2", fn, scratch_ + 256,
            static_cast<const void*>(host_copy_), size_t{64}, h);
    } else if (d == "dtoh") {
      auto fn = ptsz ? sym<DtoHAsyncFn>("cuMemcpyDtoHAsync_v2_ptsz") : &cuMemcpyDtoHAsync;
      callp(i, ptsz ? "cuMemcpyDtoHAsync_v2_ptsz" : "cuMemcpyDtoHAsync_v2", fn,
            static_cast<void*>(host_copy_ + 256), scratch_ + 512, size_t{64}, h);
    } else if (d == "dtod") {
      auto fn = ptsz ? sym<DtoDAsyncFn>("cuMemcpyDtoDAsync_v2_ptsz") : &cuMemcpyDtoDAsync;
      callp(i, ptsz ? "cuMemcpyDtoDAsync_v2_ptsz" : "cuMemcpyDtoDAsync_v2", fn, scratch_ + 1024, scratch_ + 2048,
            size_t{64}, h);
    } else {
      auto fn = ptsz ? sym<MemsetAsyncFn>("cuMemsetD8Async_ptsz") : &cuMemsetD8Async;
      callp(i, ptsz ? "cuMemsetD8Async_ptsz" : "cuMemsetD8Async", fn, scratch_ + 3072, static_cast<unsigned char>(7),
            size_t{64}, h);
    }
  } else if (kind == "memop") {
    memop(i, op["s"], op.value("bits", 32), str(op, "target", "host"), i);
    if (op.value("fault", false)) fault_launched();
  } else if (kind == "free_async") {
    std::string b = op["block"];
    if (freed_.count(b) || !blocks_.count(b)) return skip(i);
    CUstream h = stream(op["s"], &ptsz);
    auto fn = sym<FreeAsyncFn>(ptsz ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync");
    callp(i, ptsz ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync", fn, blocks_.at(b), h);
    freed_.insert(b);
  } else if (kind == "gate") {
    CUstream h = stream(op["s"], &ptsz);
    auto fn = ptsz ? sym<HostFuncFn>("cuLaunchHostFunc_ptsz") : &cuLaunchHostFunc;
    void* id = reinterpret_cast<void*>(static_cast<intptr_t>(op["id"].get<int>()));
    callp(i, ptsz ? "cuLaunchHostFunc_ptsz" : "cuLaunchHostFunc", fn, h, static_cast<CUhostFn>(oracle_gate_wait), id);
  } else if (kind == "device") {
    set_current(i, ctxs_.at(op["d"].get<size_t>()));
  } else if (kind == "dev_reset") {
    op_dev_reset(t, i, op);
  } else if (kind == "open") {
    oracle_gate_open(op["id"]);
  } else if (kind == "host_sleep") {
    std::this_thread::sleep_for(std::chrono::microseconds(op["us"].get<long>()));
  } else if (kind == "barrier") {
    if (barrier_) barrier_->wait();
  } else if (kind == "reload") {
    call(i, "cuModuleUnload", [&] { return cuModuleUnload(mod_); });
    call(i, "cuLibraryUnload", [&] { return cuLibraryUnload(lib_); });
    load_modules(op.value("names", json()));
  } else if (kind == "ctx") {
    op_ctx(t, i, op);
  } else if (kind == "capture") {
    op_capture(t, i, op);
  } else if (kind == "build") {
    op_build(t, i, op);
  } else if (kind == "node_set") {
    auto g = graphs_.find(op["graph"]);
    if (g == graphs_.end()) return skip(i);
    CUgraphNode n = graph_node(i, g->second.first, op["idx"].get<size_t>());
    if (!n) return skip(i);
    std::string how = str(op, "how", "v2");
    Args a;
    if (how == "v1") {
      auto p = knode1(op, &a);
      auto fn = sym<KernelNodeSet1Fn>("cuGraphKernelNodeSetParams");
      call(i, "cuGraphKernelNodeSetParams", [&] { return fn(n, &p); });
    } else if (how == "v2") {
      auto p = knode2(op, &a, false);
      call(i, "cuGraphKernelNodeSetParams_v2", [&] { return cuGraphKernelNodeSetParams(n, &p); });
    } else {
      auto np = knode(op, &a);
      call(i, "cuGraphNodeSetParams", [&] { return cuGraphNodeSetParams(n, &np); });
    }
  } else if (kind == "instantiate") {
    auto g = graphs_.find(op["graph"]);
    if (g == graphs_.end() || execs_.count(op["exec"])) return skip(i);
    CUgraphExec e = nullptr;
    call(i, "cuGraphInstantiateWithFlags", [&] { return cuGraphInstantiateWithFlags(&e, g->second.first, 0); });
    execs_[op["exec"]] = {e, g->second.second};
  } else if (kind == "exec_set") {
    CUgraphExec e;
    CUgraphNode n;
    if (!exec_node(i, op, &e, &n)) return skip(i);
    std::string how = str(op, "how", "v2");
    Args a;
    if (how == "v1") {
      auto p = knode1(op, &a);
      auto fn = sym<ExecKernelNodeSet1Fn>("cuGraphExecKernelNodeSetParams");
      call(i, "cuGraphExecKernelNodeSetParams", [&] { return fn(e, n, &p); });
    } else if (how == "v2") {
      auto p = knode2(op, &a, false);
      call(i, "cuGraphExecKernelNodeSetParams_v2", [&] { return cuGraphExecKernelNodeSetParams(e, n, &p); });
    } else {
      auto np = knode(op, &a);
      call(i, "cuGraphExecNodeSetParams", [&] { return cuGraphExecNodeSetParams(e, n, &np); });
    }
  } else if (kind == "enable") {
    CUgraphExec e;
    CUgraphNode n;
    if (!exec_node(i, op, &e, &n)) return skip(i);
    call(i, "cuGraphNodeSetEnabled", [&] { return cuGraphNodeSetEnabled(e, n, op["on"].get<unsigned>()); });
  } else if (kind == "exec_update") {
    auto x = execs_.find(op["exec"]);
    auto g = graphs_.find(op["graph"]);
    if (x == execs_.end() || g == graphs_.end()) return skip(i);
    if (str(op, "how") == "v1") {
      CUgraphNode err = nullptr;
      CUgraphExecUpdateResult res;
      auto fn = sym<ExecUpdate1Fn>("cuGraphExecUpdate");
      call(i, "cuGraphExecUpdate", [&] { return fn(x->second.first, g->second.first, &err, &res); });
    } else {
      CUgraphExecUpdateResultInfo info{};
      call(i, "cuGraphExecUpdate_v2", [&] { return cuGraphExecUpdate(x->second.first, g->second.first, &info); });
    }
  } else if (kind == "graph_launch") {
    auto x = execs_.find(op["exec"]);
    if (x == execs_.end()) return skip(i);
    graph_launch(t, i, x->second.first, op["s"]);
    if (op.value("fault", false)) fault_launched();
  } else if (kind == "graph_destroy") {
    auto g = graphs_.find(op["graph"]);
    if (g == graphs_.end()) return skip(i);
    CUgraph h = g->second.first;
    graphs_.erase(g);
    call(i, "cuGraphDestroy", [&] { return cuGraphDestroy(h); });
  } else if (kind == "exec_destroy") {
    auto x = execs_.find(op["exec"]);
    if (x == execs_.end()) return skip(i);
    CUgraphExec h = x->second.first;
    execs_.erase(x);
    call(i, "cuGraphExecDestroy", [&] { return cuGraphExecDestroy(h); });
  } else if (kind == "cycles") {
    op_cycles(t, i, op);
  } else {
    fprintf(stderr, "oracle_runner: unknown op %s\n", kind.c_str());
    exit(3);
  }
}

void Runner::thread_main(int t, const std::vector<std::pair<int, const json*>>& ops) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    result_["tids"][std::to_string(t)] = tid();
  }
  if (t) {
    try {
      set_current(-1, ctx_);
    } catch (const StickyError&) {
      if (barrier_) barrier_->abort();
      throw;
    }
  }
  for (auto [i, op] : ops) {
    try {
      run_op(t, i, *op);
    } catch (const OpFailed&) {
      continue;
    } catch (const StickyError&) {
      if (barrier_) barrier_->abort();
      throw;
    }
  }
}

int Runner::run() {
  const json& ops = prog_["ops"];
  int nthreads = 1;
  for (const auto& op : ops) nthreads = std::max(nthreads, op.value("t", 0) + 1);
  std::vector<std::vector<std::pair<int, const json*>>> per(nthreads);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i]["op"] == "barrier")
      for (auto& v : per) v.emplace_back(static_cast<int>(i), &ops[i]);
    else
      per[ops[i].value("t", 0)].emplace_back(static_cast<int>(i), &ops[i]);
  }
  Barrier barrier(nthreads);
  if (nthreads > 1) barrier_ = &barrier;
  std::atomic<int> sticky{0};
  auto body = [&](int t) {
    try {
      thread_main(t, per[t]);
    } catch (const StickyError& e) {
      sticky = e.code;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < nthreads; ++t) threads.emplace_back(body, t);
  body(0);
  for (auto& th : threads) th.join();
  barrier_ = nullptr;
  oracle_gate_open_all();
  if (!sticky && reset_end_) {
    CUdevice dev0 = 0;
    if (emit_) emit_(kCbPrimaryReset, 0, "cuDevicePrimaryCtxReset_v2", nullptr, &dev0, 0);
    CUresult r = cuDevicePrimaryCtxReset(dev0);
    if (emit_) emit_(kCbPrimaryReset, 1, "cuDevicePrimaryCtxReset_v2", nullptr, &dev0, static_cast<int>(r));
  }
  result_["done"] = true;
  return sticky ? 1 : 0;
}

void Runner::write_result() {
  const char* path = getenv("ORACLE_RESULT");
  if (!path) return;
  std::lock_guard<std::mutex> lk(mu_);
  std::ofstream(path) << result_.dump();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: oracle_runner PROGRAM.json\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    fprintf(stderr, "oracle_runner: cannot read %s\n", argv[1]);
    return 2;
  }
  Runner r(json::parse(in));
  int status = 0;
  try {
    r.setup();
    status = r.run();
  } catch (const StickyError&) {
    status = 1;
  } catch (const OpFailed&) {
    fprintf(stderr, "oracle_runner: the program's setup failed\n");
    status = 3;
  }
  oracle_gate_open_all();
  r.write_result();
  if (status == 1) fprintf(stderr, "oracle_runner: a CUDA call returned a sticky fault\n");
  return status;
}
