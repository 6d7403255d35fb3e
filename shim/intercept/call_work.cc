// call_work (front_end.h): what a driver call a front end saw puts on a stream, from the entry-point table.
//
// CUPTI hands a callback the call's exported name (functionName) and its parameter block (generated_cuda_meta.h's
// <name>_params: the call's arguments, in order, as the members of a C struct). The table has every entry point's
// prototype, so the stream's place in that block follows from the prototype alone, by C's layout rules (each member
// at the next multiple of its alignment): no per-call list. cupti_tracer/decode.cc checks the rule against
// generated_cuda_meta.h's own structs.
#include "shim/intercept/trampolines.h"  // first: it asks cuda.h for the old signatures

#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "shim/common/passthrough.h"
#include "shim/intercept/entry_points.h"
#include "shim/intercept/front_end.h"

namespace cdsa {
namespace {

using trampoline::CallInfo;
using trampoline::kCalls;
using trampoline::Kind;
using trampoline::kNumCalls;
using trampoline::Sig;

// Where the first CUstream and the first CUcontext argument sit in the parameter block of prototype F (-1: none),
// and how many arguments it has.
template <typename F>
struct Block {
  static constexpr int stream = -1, context = -1, arity = -1;
};
template <typename... A>
struct Block<CUresult(CUDAAPI*)(A...)> {
  struct Offsets {
    int stream = -1, context = -1;
  };
  static constexpr Offsets compute() {
    Offsets o;
    size_t at = 0;
    auto place = [&](size_t size, size_t align, bool is_stream, bool is_context) {
      at = (at + align - 1) / align * align;
      if (o.stream < 0 && is_stream) o.stream = static_cast<int>(at);
      if (o.context < 0 && is_context) o.context = static_cast<int>(at);
      at += size;
    };
    (void)place;  // a prototype without arguments
    (place(sizeof(A), alignof(A), std::is_same_v<std::remove_cv_t<A>, CUstream>,
           std::is_same_v<std::remove_cv_t<A>, CUcontext>),
     ...);
    return o;
  }
  static constexpr int stream = compute().stream, context = compute().context;
  static constexpr int arity = sizeof...(A);
};

struct Place {
  short stream, context, arity;
};
template <size_t... I>
constexpr std::array<Place, kNumCalls> places(std::index_sequence<I...>) {
  return {{Place{static_cast<short>(Block<typename Sig<static_cast<int>(I)>::Fn>::stream),
                 static_cast<short>(Block<typename Sig<static_cast<int>(I)>::Fn>::context),
                 static_cast<short>(Block<typename Sig<static_cast<int>(I)>::Fn>::arity)}...}};
}
constexpr std::array<Place, kNumCalls> kPlaces = places(std::make_index_sequence<kNumCalls>());

// The rule on prototypes whose layout is plain to see (their _params structs in generated_cuda_meta.h).
static_assert(Block<PFN_cuStreamWriteValue32_v11070>::stream == 0);
static_assert(Block<PFN_cuMemcpyHtoDAsync_v3020>::stream == 24);
static_assert(Block<PFN_cuMemsetD8Async_v3020>::stream == 24);  // unsigned char padded to the size_t after it
static_assert(Block<PFN_cuMemFreeAsync_v11020>::stream == 8);
static_assert(Block<PFN_cuCtxSynchronize_v13000>::context == 0 && Block<PFN_cuCtxSynchronize_v2000>::arity == 0);

template <typename T>
T read_at(const void* params, int offset) {
  T v;
  memcpy(&v, static_cast<const char*>(params) + offset, sizeof v);
  return v;
}

}  // namespace

int call_work_stream_offset(const char* symbol) noexcept {
  const int id = symbol ? find_entry_symbol(symbol) : -1;
  return id < 0 ? -1 : kPlaces[id].stream;
}

CallWork call_work(const char* symbol, const void* params) noexcept {
  CallWork w;
  if (!symbol) return w;
  const int id = find_entry_symbol(symbol);
  if (id < 0) {
    // A name the table lacks (a newer driver's entry point): what it does is not known, only whether it may work.
    if (is_unknown_driver_symbol(symbol) && entry_point_changes_work(symbol)) w.what = CallWork::Unknown;
    return w;
  }
  const CallInfo& c = kCalls[id];
  const Place& p = kPlaces[id];
  w.per_thread = c.per_thread;
  const bool stream_known = params && p.stream >= 0;
  if (stream_known) w.stream = read_at<CUstream>(params, p.stream);
  w.names_stream = stream_known;
  switch (c.kind) {
    case Kind::StreamWork:
      w.what = stream_known ? CallWork::Stream : CallWork::Unknown;
      break;
    case Kind::DefaultStreamWork:
    case Kind::SyncCopyToHost:
      w.what = CallWork::DefaultStream;
      break;
    case Kind::StreamSync:
      w.what = stream_known ? CallWork::StreamSync : CallWork::None;
      break;
    case Kind::CtxSync:
      // cuCtxSynchronize_v2(ctx) names its context (NULL: the current one); cuCtxSynchronize means the current one.
      if (p.arity == 0 || (params && p.context >= 0)) {
        w.what = CallWork::CtxSync;
        if (p.arity > 0) w.ctx = read_at<CUcontext>(params, p.context);
      }
      break;
    case Kind::StreamDestroy:
      // cuStreamDestroy, or a context's destroy, release or reset (no stream: its streams go with it).
      w.what = CallWork::StreamDestroy;
      break;
    case Kind::StreamInfo:
      break;
    default:
      // Any other call on a stream waits for it or puts work on it that cannot fault: its deferred mark goes first.
      if (stream_known) w.what = CallWork::StreamOp;
      break;
  }
  return w;
}

}  // namespace cdsa
