// Decoding CUPTI driver-API callback data (CUpti_CallbackData) into cdsa's
// LaunchInfo, and reading the API-exit return value.
//
// Contract: pure functions over the structs CUPTI hands to a callback. No
// allocation, no lock, no driver call, no CUPTI call: safe on any thread and
// from inside a callback. A null `functionParams`, a null launch config or an
// unknown callback id yields "not a launch" (0), never a crash. The layouts of
// the parameter structs are those of generated_cuda_meta.h; the _ptsz variants
// share the layout of their base call.
//
// Example (in a CUpti_CallbackFunc for CUPTI_CB_DOMAIN_DRIVER_API):
//   LaunchInfo li[4];
//   int n = cupti::decode_launches(cbid, *data, li, 4);     // 0: not a launch
//   if (data->callbackSite == CUPTI_API_EXIT && cupti::exit_result(*data) == CUDA_SUCCESS)
//     for (int i = 0; i < n; ++i) record_launch(li[i], LaunchSource::Cupti);
#pragma once

#include <cuda.h>
#include <cupti_callbacks.h>
#include <cstddef>
#include <cstdint>

#include "shim/record/launch.h"

namespace cdsa::cupti {

// The driver-domain callback ids cdsa enables and decodes (see cupti_driver_cbid.h).
inline constexpr uint32_t kCbLaunch = 115;           // cuLaunch (legacy)
inline constexpr uint32_t kCbLaunchGrid = 116;       // cuLaunchGrid (legacy)
inline constexpr uint32_t kCbLaunchGridAsync = 117;  // cuLaunchGridAsync (legacy)
inline constexpr uint32_t kCbLaunchKernel = 307;
inline constexpr uint32_t kCbLaunchKernelPtsz = 442;
inline constexpr uint32_t kCbLaunchCooperative = 477;
inline constexpr uint32_t kCbLaunchCooperativePtsz = 478;
inline constexpr uint32_t kCbLaunchCooperativeMultiDevice = 480;
inline constexpr uint32_t kCbGraphLaunch = 514;
inline constexpr uint32_t kCbGraphLaunchPtsz = 515;
inline constexpr uint32_t kCbLaunchKernelEx = 652;
inline constexpr uint32_t kCbLaunchKernelExPtsz = 653;
inline constexpr uint32_t kLaunchCbids[] = {
    kCbLaunch,           kCbLaunchGrid,        kCbLaunchGridAsync,       kCbLaunchKernel,
    kCbLaunchKernelPtsz, kCbLaunchCooperative, kCbLaunchCooperativePtsz, kCbLaunchCooperativeMultiDevice,
    kCbGraphLaunch,      kCbGraphLaunchPtsz,   kCbLaunchKernelEx,        kCbLaunchKernelExPtsz};

bool is_launch_cbid(uint32_t cbid) noexcept;
// The calls that tear a context down (cuCtxDestroy, cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxReset, each
// with its _v2): at their API enter the context's work can still be asked whether it faulted.
inline constexpr uint32_t kCbCtxDestroy = 11;
inline constexpr uint32_t kCbCtxDestroyV2 = 322;
inline constexpr uint32_t kCbPrimaryCtxRelease = 387;
inline constexpr uint32_t kCbPrimaryCtxReset = 389;
inline constexpr uint32_t kCbPrimaryCtxReleaseV2 = 544;
inline constexpr uint32_t kCbPrimaryCtxResetV2 = 545;
bool is_teardown_cbid(uint32_t cbid) noexcept;
// Stream capture, as CUPTI's driver-API callbacks name it (cupti_driver_cbid.h; decode.cc checks each id): a
// capture begun or ended on `stream`, and whether the call is the per-thread-default-stream (_ptsz) variant.
// Recapture: cuStreamBeginRecaptureToGraph (13.3), a Begin into an existing graph whose nodes it replaces
// (recapture_graph names the graph).
enum class CaptureCall { None, Begin, Recapture, End };
CaptureCall capture_call(uint32_t cbid, bool* per_thread) noexcept;
// The stream of a capture call's parameters (every one of them has it first), and the graph an ended capture
// made (null for a CIG capture, or when the call failed).
CUstream capture_stream(const CUpti_CallbackData& data) noexcept;
CUgraph ended_capture_graph(uint32_t cbid, const CUpti_CallbackData& data) noexcept;
CUgraph recapture_graph(const CUpti_CallbackData& data) noexcept;
// cuStreamBeginRecaptureToGraph[_ptsz]'s ids, which CUPTI headers before 13.5 lack (decode.cc checks them where
// they have them).
inline constexpr uint32_t kCbBeginRecapture = 846;
inline constexpr uint32_t kCbBeginRecapturePtsz = 847;

// Fills up to `max` LaunchInfo from a launch callback's parameters (the
// multi-device cooperative launch gives one per device; every other launch
// gives one). Returns how many were filled: 0 when `cbid` is not a launch or
// the parameters are missing. Legacy cuLaunch/cuLaunchGrid carry no block
// shape: block stays {1,1,1}.
int decode_launches(uint32_t cbid, const CUpti_CallbackData& data, LaunchInfo* out, int max) noexcept;

// The kernel handle of a launch callback (for prepare_launch at API enter);
// null for graph launches, non-launches and missing parameters.
CUfunction launch_function(uint32_t cbid, const CUpti_CallbackData& data) noexcept;

// The driver call's return value: meaningful at CUPTI_API_EXIT only;
// CUDA_SUCCESS when CUPTI gave none.
CUresult exit_result(const CUpti_CallbackData& data) noexcept;

}  // namespace cdsa::cupti
