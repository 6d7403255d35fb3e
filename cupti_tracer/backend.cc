#include "cupti_tracer/backend.h"

#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "cupti_tracer/decode.h"
#include "cupti_tracer/discovery.h"
#include "shim/common/thread_block.h"
#include "shim/intercept/front_end.h"

#include "base/export.h"

namespace cdsa {
namespace {

using SubscribeFn = CUptiResult(CUPTIAPI*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using SubscribeV2Fn = CUptiResult(CUPTIAPI*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                                             CUpti_SubscriberParams*);
using UnsubscribeFn = CUptiResult(CUPTIAPI*)(CUpti_SubscriberHandle);
using EnableDomainFn = CUptiResult(CUPTIAPI*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
using ResultStringFn = CUptiResult(CUPTIAPI*)(CUptiResult, const char**);

std::atomic<bool> g_active{false};
std::atomic<bool> g_injected{false};
std::atomic<bool> g_alone{false};  // no interposition: CUPTI's callbacks are all cdsa sees of the program
std::once_flag g_once;
CUpti_SubscriberHandle g_subscriber = nullptr;

// The last launch this thread's CUPTI callback recorded, for the wrapper of the same call to recognise.
struct LastLaunch {
  CUfunction func = nullptr;
  CUgraphExec graph = nullptr;
  CUstream stream = nullptr;
  bool set = false;
};
thread_local LastLaunch tl_last;

constexpr const char* kFallback = "recording launches through driver interposition instead";

// Whether libcdsa.so's exported driver wrappers are in the global scope (it was preloaded), i.e. whether
// interposition can take over when CUPTI cannot.
// (The main program's handle searches the global scope only; RTLD_DEFAULT would also search the caller's own
// local scope, and so find libcdsa.so's exports even when the driver dlopen'ed it RTLD_LOCAL.)
bool interposition_present() {
  void* global = dlopen(nullptr, RTLD_LAZY);
  void* p = global ? front_end_dlsym(global, "cuLaunchKernel") : nullptr;
  return p && in_cdsa_code(p);
}

const char* fallback_text() {
  return interposition_present() ? kFallback : "and libcdsa.so is not preloaded (LD_PRELOAD), so no launch is recorded";
}

void* open_cupti(std::string* path, std::vector<std::string>* searched) {
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    if (void* h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)) {
      *path = std::string(soname) + " (already loaded)";
      return h;
    }
  }
  cupti::SearchInputs in = cupti::current_search_inputs();
  *searched = cupti::cupti_search_dirs(in);
  if (in.cuda_home.empty()) searched->push_back("the loader's default search");
  for (const auto& c : cupti::cupti_candidates(in)) {
    if (void* h = dlopen(c.c_str(), RTLD_LAZY | RTLD_LOCAL)) {
      *path = c;
      return h;
    }
  }
  return nullptr;
}

// What this thread's current call began at its API enter (on_call_work), for its exit to end. In a ThreadBlock,
// not thread_local: loaded by injection, libcdsa.so's static TLS must stay small (shim/common/thread_block.h). The
// proof lives in raw storage, made at the enter and destroyed at the exit, so the block stays trivially destructible.
struct CallInFlight {
  bool region;    // note_stream_work began a region of the stream's order
  bool destroys;  // stream handles may be reused after the call
  bool has_proof;
  alignas(SyncProof) unsigned char proof[sizeof(SyncProof)];  // a synchronizing call's, good once it succeeded
  SyncProof* held() { return has_proof ? std::launder(reinterpret_cast<SyncProof*>(proof)) : nullptr; }
  void end() {
    if (SyncProof* p = held()) p->~SyncProof();
    region = destroys = has_proof = false;
  }
};

// A call that is no launch and no capture, where no wrapper of cdsa's sees it (CUPTI alone): what it does to the
// streams, as a wrapper of the same entry point would note it (shim/intercept/trampolines.inc), from the
// entry-point table by its name and parameter block (front_end.h call_work). Work on a stream keeps its place in
// the stream's order; a synchronizing call's success proves what it waited for; any call on a stream places the
// stream's deferred mark first; a call the table cannot describe leaves work no record covers.
void on_call_work(const CUpti_CallbackData& data) {
  CallInFlight* call = ThreadBlock<CallInFlight>::get();
  if (!call) {  // no block for this thread (the mapping failed): its work is work no record covers
    const CallWork::What what = call_work(data.functionName, data.functionParams).what;
    if (data.callbackSite == CUPTI_API_ENTER &&
        (what == CallWork::Stream || what == CallWork::DefaultStream || what == CallWork::Unknown))
      note_stream_work_unseen();
    return;
  }
  if (data.callbackSite == CUPTI_API_ENTER) {
    call->end();
    const CallWork w = call_work(data.functionName, data.functionParams);
    switch (w.what) {
      case CallWork::Stream:
      case CallWork::DefaultStream: {
        // Unless the context was already dead (the driver then refuses the work).
        if (!before_stream_operation(w.stream, w.per_thread)) note_stream_work(w.stream, w.per_thread);
        call->region = true;
        break;
      }
      case CallWork::StreamSync:
        new (call->proof) SyncProof(SyncProof::stream(w.stream, w.per_thread));
        call->has_proof = true;
        break;
      case CallWork::CtxSync:
        new (call->proof) SyncProof(SyncProof::context(w.ctx));
        call->has_proof = true;
        break;
      case CallWork::StreamOp:
        before_stream_operation(w.stream, w.per_thread);
        break;
      case CallWork::StreamDestroy:
        if (w.names_stream) before_stream_destroy(w.stream, w.per_thread);
        call->destroys = true;
        break;
      case CallWork::Unknown:
        note_stream_work_unseen();
        break;
      case CallWork::None:
        break;
    }
    return;
  }
  if (data.callbackSite != CUPTI_API_EXIT) return;
  if (call->region) end_thread_region();  // the op's region (note_stream_work)
  if (call->destroys) note_stream_destroyed();
  if (SyncProof* p = call->held(); p && cupti::exit_result(data) == CUDA_SUCCESS) p->succeeded();
  call->end();
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !cbdata || InCdsa::active()) return;
  const auto& data = *static_cast<const CUpti_CallbackData*>(cbdata);
  // Stream capture: where no wrapper of cdsa's sees the call (CUPTI alone, by injection), the capture is noted
  // here, so that no breadcrumb of cdsa's goes into the program's graph (the launch path places marks only outside
  // a capture it knows of). Inside a wrapper (in_wrapped_driver_call) the wrapper notes it, once.
  bool per_thread = false;
  if (cupti::CaptureCall c = cupti::capture_call(cbid, &per_thread);
      c != cupti::CaptureCall::None && !in_wrapped_driver_call()) {
    CUstream s = cupti::capture_stream(data);
    const bool begin = c == cupti::CaptureCall::Begin || c == cupti::CaptureCall::Recapture;
    if (begin && data.callbackSite == CUPTI_API_ENTER)
      before_stream_operation(s, per_thread);  // its deferred mark goes out before the capture, not into it
    else if (begin && data.callbackSite == CUPTI_API_EXIT && cupti::exit_result(data) == CUDA_SUCCESS)
      capture_begun(s, per_thread, c == cupti::CaptureCall::Recapture ? cupti::recapture_graph(data) : nullptr);
    else if (c == cupti::CaptureCall::End && data.callbackSite == CUPTI_API_EXIT)
      capture_ended(s, per_thread,
                    cupti::exit_result(data) == CUDA_SUCCESS ? cupti::ended_capture_graph(cbid, data) : nullptr);
    return;
  }
  bool launch = cupti::is_launch_cbid(cbid);
  if (!launch && g_alone.load(std::memory_order_relaxed) && !in_wrapped_driver_call()) on_call_work(data);
  if (data.callbackSite == CUPTI_API_ENTER) {
    // A context about to be torn down, which no wrapper of cdsa's saw (CUPTI alone; or the driver's own call): its
    // work is asked now whether it faulted, while the context still answers with the fault's own code; after it,
    // only the exit probe is left, which finds the driver torn down and no code (cudart's exit handlers release
    // the primary context before cdsa's).
    if (!launch) {
      if (cupti::is_teardown_cbid(cbid) && !in_wrapped_driver_call())
        before_teardown("the context's teardown (cdsa's query of its streams before it, at CUPTI's callback)");
      return;
    }
    CUfunction f = cupti::launch_function(cbid, data);
    // The name CUPTI hands over is valid only now: keep it for drivers without cuFuncGetName.
    // Alone, it also replaces a stale name: a context torn down since freed the handle, and no wrapper saw it go.
    note_kernel_name(f, data.symbolName, g_alone.load(std::memory_order_relaxed));
    // In flight until the exit (shim/record/launch.h): a report on another thread waits for it. The stream's
    // deferred mark is placed now, before the launch, or folded into a PDL launch's own: without interposition the
    // backend sees no other operation on the stream, so a stream's launches are where its deferred marks go out (a
    // stream's last one waits for the next, unproven; marks of streams that carry no PDL go out at once anyway).
    LaunchInfo li[1];
    if (cbid != cupti::kCbLaunchCooperativeMultiDevice && cupti::decode_launches(cbid, data, li, 1) == 1)
      launch_begin(f, li[0].stream, li[0].per_thread, li[0].programmatic ? MarkBefore::Fold : MarkBefore::Settle);
    else
      launch_begin(f);
    return;
  }
  if (data.callbackSite != CUPTI_API_EXIT) return;
  CUresult r = cupti::exit_result(data);
  if (r == CUDA_SUCCESS) {
    if (!launch) return;
    LaunchInfo li[8];
    int n = cupti::decode_launches(cbid, data, li, 8);
    launch_succeeded(li, n, LaunchSource::Cupti);
    if (n > 0) tl_last = LastLaunch{li[0].func, li[0].graph_exec, li[0].stream, true};
  } else {
    if (launch) launch_failed();
    surface_driver_result(r, data.functionName);
  }
}

void start_once() {
  InCdsa guard;  // libcupti may call the driver: those calls must pass through cdsa untouched
  g_alone.store(!interposition_present(), std::memory_order_relaxed);
  std::string path;
  std::vector<std::string> searched;
  void* h = open_cupti(&path, &searched);
  if (!h) {
    log_line("CDSA_BACKEND=cupti: libcupti not found (searched: %s); %s", cupti::join_dirs(searched).c_str(),
             fallback_text());
    return;
  }
  auto sym = [h](const char* name) { return front_end_dlsym(h, name); };
  auto subscribe = reinterpret_cast<SubscribeFn>(sym("cuptiSubscribe"));
  auto subscribe_v2 = reinterpret_cast<SubscribeV2Fn>(sym("cuptiSubscribe_v2"));
  auto unsubscribe = reinterpret_cast<UnsubscribeFn>(sym("cuptiUnsubscribe"));
  auto enable_domain = reinterpret_cast<EnableDomainFn>(sym("cuptiEnableDomain"));
  auto result_string = reinterpret_cast<ResultStringFn>(sym("cuptiGetResultString"));
  if ((!subscribe && !subscribe_v2) || !enable_domain) {
    log_line("CDSA_BACKEND=cupti: %s lacks cuptiSubscribe/cuptiEnableDomain; %s", path.c_str(), fallback_text());
    return;
  }
  auto describe = [&](CUptiResult r) {
    const char* s = nullptr;
    if (result_string && result_string(r, &s) == CUPTI_SUCCESS && s) return std::string(s);
    return std::string("CUPTI error");
  };

  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64] = {0};
  CUptiResult r;
  if (subscribe_v2) {
    CUpti_SubscriberParams params;
    memset(&params, 0, sizeof params);
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "cdsa";
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof holder;
    r = subscribe_v2(&g_subscriber, on_callback, nullptr, &params);
  } else {
    r = subscribe(&g_subscriber, on_callback, nullptr);
  }
  holder[sizeof holder - 1] = '\0';
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    log_line(
        "CDSA_BACKEND=cupti: the one CUPTI subscriber slot is taken%s%s (nsys, ncu, compute-sanitizer and "
        "torch.profiler hold it); %s",
        holder[0] ? " by " : "", holder, fallback_text());
    return;
  }
  if (r != CUPTI_SUCCESS) {
    log_line("CDSA_BACKEND=cupti: cuptiSubscribe failed: %s (%d, %s); %s", describe(r).c_str(), static_cast<int>(r),
             path.c_str(), fallback_text());
    return;
  }
  r = enable_domain(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  if (r != CUPTI_SUCCESS) {
    log_line("CDSA_BACKEND=cupti: cuptiEnableDomain(driver API) failed: %s (%d); %s", describe(r).c_str(),
             static_cast<int>(r), fallback_text());
    if (unsubscribe) unsubscribe(g_subscriber);
    g_subscriber = nullptr;
    return;
  }
  g_active.store(true, std::memory_order_release);
  set_launch_filter(cupti_backend_recorded);
}

// After entry.cc's constructor(101) has read the configuration: start with cdsa when CDSA_BACKEND=cupti.
__attribute__((constructor(102))) void register_backend() {
  if (config().enabled && config().backend == Backend::Cupti) on_started(cupti_backend_start);
}

}  // namespace

bool cupti_backend_active() noexcept { return g_active.load(std::memory_order_relaxed); }

bool cupti_backend_recorded(const LaunchInfo& info) noexcept {
  if (!g_active.load(std::memory_order_relaxed)) return false;
  bool same =
      tl_last.set && tl_last.func == info.func && tl_last.graph == info.graph_exec && tl_last.stream == info.stream;
  tl_last.set = false;
  if (!same)
    CDSA_NOTICE_ONCE(
        "CDSA_BACKEND=cupti: CUPTI did not report a launch that the driver interposition saw; such "
        "launches are recorded through interposition");
  return same;
}

void cupti_backend_start() noexcept {
  if (!config().enabled) return;
  if (config().backend != Backend::Cupti && !g_injected.load(std::memory_order_acquire)) return;
  std::call_once(g_once, start_once);
}

}  // namespace cdsa

extern "C" CDSA_EXPORT int InitializeInjection(void) {
  using namespace cdsa;
  if (!config().enabled) return 1;
  g_injected.store(true, std::memory_order_release);
  void* hint = nullptr;
  if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) hint = front_end_dlsym(h, "cuInit");
  if (ensure_started(hint)) cupti_backend_start();
  return 1;
}
