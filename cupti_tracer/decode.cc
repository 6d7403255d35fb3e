#include "cupti_tracer/decode.h"

// cupti.h brings generated_cuda_meta.h (the parameter structs of every driver
// call) together with the obsolete "_v1" typedefs it needs.
#include <cupti.h>
#include <cstddef>
#include <cstring>

namespace cdsa::cupti {
namespace {

// The ids restated in decode.h are those of this toolkit's cupti_driver_cbid.h.
static_assert(kCbLaunch == CUPTI_DRIVER_TRACE_CBID_cuLaunch && kCbLaunchGrid == CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid &&
              kCbLaunchGridAsync == CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync);
static_assert(kCbLaunchKernel == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel &&
              kCbLaunchKernelPtsz == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz);
static_assert(kCbLaunchCooperative == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel &&
              kCbLaunchCooperativePtsz == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz &&
              kCbLaunchCooperativeMultiDevice == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice);
static_assert(kCbGraphLaunch == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch &&
              kCbGraphLaunchPtsz == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz);
static_assert(kCbLaunchKernelEx == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx &&
              kCbLaunchKernelExPtsz == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz);
static_assert(kCbCtxDestroy == CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy &&
              kCbCtxDestroyV2 == CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2 &&
              kCbPrimaryCtxRelease == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease &&
              kCbPrimaryCtxReset == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset &&
              kCbPrimaryCtxReleaseV2 == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2 &&
              kCbPrimaryCtxResetV2 == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2);

bool per_thread_cbid(uint32_t cbid) {
  return cbid == kCbLaunchKernelPtsz || cbid == kCbLaunchCooperativePtsz || cbid == kCbGraphLaunchPtsz ||
         cbid == kCbLaunchKernelExPtsz;
}

void set3(unsigned* dst, unsigned x, unsigned y, unsigned z) { dst[0] = x, dst[1] = y, dst[2] = z; }

}  // namespace

bool is_launch_cbid(uint32_t cbid) noexcept {
  for (uint32_t c : kLaunchCbids)
    if (c == cbid) return true;
  return false;
}

bool is_teardown_cbid(uint32_t cbid) noexcept {
  return cbid == kCbCtxDestroy || cbid == kCbCtxDestroyV2 || cbid == kCbPrimaryCtxRelease ||
         cbid == kCbPrimaryCtxReset || cbid == kCbPrimaryCtxReleaseV2 || cbid == kCbPrimaryCtxResetV2;
}

namespace {
// cuLaunchKernel_params and cuLaunchCooperativeKernel_params share these fields.
template <typename Params>
void from_grid_params(const Params& a, LaunchKind kind, LaunchInfo* li) {
  li->kind = kind;
  li->func = a.f;
  li->stream = a.hStream;
  set3(li->grid, a.gridDimX, a.gridDimY, a.gridDimZ);
  set3(li->block, a.blockDimX, a.blockDimY, a.blockDimZ);
  li->shared_mem = a.sharedMemBytes;
}
}  // namespace

int decode_launches(uint32_t cbid, const CUpti_CallbackData& data, LaunchInfo* out, int max) noexcept {
  if (!out || max <= 0 || !data.functionParams || !is_launch_cbid(cbid)) return 0;
  const void* p = data.functionParams;
  LaunchInfo li;
  li.per_thread = per_thread_cbid(cbid);
  switch (cbid) {
    case kCbLaunchKernel:
    case kCbLaunchKernelPtsz:
      from_grid_params(*static_cast<const cuLaunchKernel_params*>(p), LaunchKind::Kernel, &li);
      break;
    case kCbLaunchCooperative:
    case kCbLaunchCooperativePtsz:
      from_grid_params(*static_cast<const cuLaunchCooperativeKernel_params*>(p), LaunchKind::Cooperative, &li);
      break;
    case kCbLaunchCooperativeMultiDevice: {
      auto* a = static_cast<const cuLaunchCooperativeKernelMultiDevice_params*>(p);
      if (!a->launchParamsList) return 0;
      int n = 0;
      for (unsigned i = 0; i < a->numDevices && n < max; ++i) {
        const CUDA_LAUNCH_PARAMS& lp = a->launchParamsList[i];
        LaunchInfo m;
        m.kind = LaunchKind::Cooperative;
        m.func = lp.function;
        m.stream = lp.hStream;
        set3(m.grid, lp.gridDimX, lp.gridDimY, lp.gridDimZ);
        set3(m.block, lp.blockDimX, lp.blockDimY, lp.blockDimZ);
        m.shared_mem = lp.sharedMemBytes;
        out[n++] = m;
      }
      return n;
    }
    case kCbLaunchKernelEx:
    case kCbLaunchKernelExPtsz: {
      auto* a = static_cast<const cuLaunchKernelEx_params*>(p);
      const CUlaunchConfig* cfg = a->config;
      if (!cfg) return 0;
      li.kind = LaunchKind::KernelEx;
      li.func = a->f;
      li.stream = cfg->hStream;
      set3(li.grid, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ);
      set3(li.block, cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ);
      li.shared_mem = cfg->sharedMemBytes;
      for (unsigned i = 0; cfg->attrs && i < cfg->numAttrs; ++i) {
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && cfg->attrs[i].value.cooperative)
          li.kind = LaunchKind::Cooperative;
        // Only programmatic stream serialization lets it overlap the kernel before it (shim/record/launch.h).
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
            cfg->attrs[i].value.programmaticStreamSerializationAllowed)
          li.programmatic = true;
      }
      break;
    }
    case kCbGraphLaunch:
    case kCbGraphLaunchPtsz: {
      auto* a = static_cast<const cuGraphLaunch_params*>(p);
      li.kind = LaunchKind::Graph;
      li.graph_exec = a->hGraph;
      li.stream = a->hStream;
      break;
    }
    case kCbLaunch: {
      li.func = static_cast<const cuLaunch_params*>(p)->f;
      break;
    }
    case kCbLaunchGrid: {
      auto* a = static_cast<const cuLaunchGrid_params*>(p);
      li.func = a->f;
      set3(li.grid, static_cast<unsigned>(a->grid_width), static_cast<unsigned>(a->grid_height), 1);
      break;
    }
    case kCbLaunchGridAsync: {
      auto* a = static_cast<const cuLaunchGridAsync_params*>(p);
      li.func = a->f;
      li.stream = a->hStream;
      set3(li.grid, static_cast<unsigned>(a->grid_width), static_cast<unsigned>(a->grid_height), 1);
      break;
    }
    default:
      return 0;
  }
  out[0] = li;
  return 1;
}

CUfunction launch_function(uint32_t cbid, const CUpti_CallbackData& data) noexcept {
  if (!data.functionParams || !is_launch_cbid(cbid) || cbid == kCbGraphLaunch || cbid == kCbGraphLaunchPtsz)
    return nullptr;
  LaunchInfo li[1];
  return decode_launches(cbid, data, li, 1) == 1 ? li[0].func : nullptr;
}

CaptureCall capture_call(uint32_t cbid, bool* per_thread) noexcept {
  *per_thread = false;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz:
      *per_thread = true;
      [[fallthrough]];
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph:
      return CaptureCall::Begin;
    case kCbBeginRecapturePtsz:
      *per_thread = true;
      [[fallthrough]];
    case kCbBeginRecapture:
      return CaptureCall::Recapture;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz:
      *per_thread = true;
      [[fallthrough]];
    case CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture:
      return CaptureCall::End;
    default:
      return CaptureCall::None;
  }
}

// Each capture call's parameter struct starts with its stream (generated_cuda_meta.h).
static_assert(offsetof(cuStreamBeginCapture_params, hStream) == 0 &&
              offsetof(cuStreamBeginCapture_v2_params, hStream) == 0 &&
              offsetof(cuStreamBeginCaptureToGraph_params, hStream) == 0 &&
              offsetof(cuStreamEndCapture_params, hStream) == 0 && offsetof(cuStreamEndCapture_ptsz_params, hStream) == 0);

// cuStreamBeginRecaptureToGraph's parameters as generated_cuda_meta.h of 13.5 has them (restated for older headers).
struct RecaptureParams {
  CUstream hStream;
  CUstreamCaptureMode mode;
  CUgraph hGraph;
};
#if CUPTI_API_VERSION >= 130500
static_assert(kCbBeginRecapture == CUPTI_DRIVER_TRACE_CBID_cuStreamBeginRecaptureToGraph &&
              kCbBeginRecapturePtsz == CUPTI_DRIVER_TRACE_CBID_cuStreamBeginRecaptureToGraph_ptsz);
static_assert(offsetof(cuStreamBeginRecaptureToGraph_params, hStream) == offsetof(RecaptureParams, hStream) &&
              offsetof(cuStreamBeginRecaptureToGraph_params, hGraph) == offsetof(RecaptureParams, hGraph) &&
              offsetof(cuStreamBeginRecaptureToGraph_ptsz_params, hGraph) == offsetof(RecaptureParams, hGraph));
#endif

CUgraph recapture_graph(const CUpti_CallbackData& data) noexcept {
  return data.functionParams ? static_cast<const RecaptureParams*>(data.functionParams)->hGraph : nullptr;
}

CUstream capture_stream(const CUpti_CallbackData& data) noexcept {
  return data.functionParams ? *static_cast<const CUstream*>(data.functionParams) : nullptr;
}

CUgraph ended_capture_graph(uint32_t cbid, const CUpti_CallbackData& data) noexcept {
  bool per_thread = false;
  if (!data.functionParams || capture_call(cbid, &per_thread) != CaptureCall::End) return nullptr;
  auto* a = static_cast<const cuStreamEndCapture_params*>(data.functionParams);  // the _ptsz struct is the same
  return a->phGraph ? *a->phGraph : nullptr;
}

CUresult exit_result(const CUpti_CallbackData& data) noexcept {
  if (data.callbackSite != CUPTI_API_EXIT || !data.functionReturnValue) return CUDA_SUCCESS;
  return *static_cast<const CUresult*>(data.functionReturnValue);
}

}  // namespace cdsa::cupti
