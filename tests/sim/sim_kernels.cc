// cdsa simulated CUDA driver (tests only): the named kernels, what they do, and the launch entry points.
// See README.md for the contract and sim_internal.h for the shared state.

#include "sim_internal.h"

namespace sim {

// ---------------------------------------------------------------- kernels

const KernelDesc kKernels[kNumKernels] = {
    {"nll_loss_forward_reduce_cuda_kernel_2d", KernelId::NllLoss, 5, {8, 8, 4, 4, 8}, {0, 8, 16, 20, 24}, 32},
    {"indexSelectSmallIndex", KernelId::IndexSelect, 4, {8, 8, 4, 4}, {0, 8, 16, 20}, 24},
    {"illegal_address", KernelId::IllegalAddress, 0, {}, {}, 0},
    {"sleep_us", KernelId::SleepUs, 1, {8}, {0}, 8},
    {"fill_f32", KernelId::FillF32, 3, {8, 4, 4}, {0, 8, 12}, 16},
};

// ---------------------------------------------------------------- execution

// The device's assert line for element `thread` of launch `it`. Its block is [0,0,0] (every element in the first block,
// as a small batch is), or with SIM_CUDA_ASSERT_BLOCK=last the launch's last block, [grid.x-1, grid.y-1, grid.z-1]:
// one that only a grid at least that large has, so programs whose launches differ in grid size (the oracle's: each
// launch its own grid.x) exercise cdsa's rule that an assert line naming a block outside a launch's grid rules it out.
std::string assert_line(const Item& it, const char* where, const char* kernel, long long thread, const char* expr) {
  unsigned b[3] = {0, 0, 0};
  if (assert_block_last())
    for (int d = 0; d < 3; ++d) b[d] = it.grid[d] > 0 ? it.grid[d] - 1 : 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s: %s: block: [%u,%u,%u], thread: [%lld,0,0] Assertion `%s` failed.", where, kernel, b[0],
           b[1], b[2], thread, expr);
  return buf;
}

// Runs a kernel other than sleep_us (no lock held).
Fault run_kernel(const Item& it) {
  Fault f;
  switch (it.k->id) {
    case KernelId::NllLoss: {
      auto* out = reinterpret_cast<float*>(it.arg<CUdeviceptr>(0));
      auto* target = reinterpret_cast<const int64_t*>(it.arg<CUdeviceptr>(1));
      int32_t n = it.arg<int32_t>(2), n_classes = it.arg<int32_t>(3);
      int64_t ignore_index = it.arg<int64_t>(4);
      if (n > 0 && target == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      int64_t valid = 0;
      for (int32_t i = 0; i < n; ++i) {
        int64_t t = target[i];
        if (t == ignore_index) continue;
        if (t < 0 || t >= n_classes) {
          f.code = CUDA_ERROR_ASSERT;
          f.lines.push_back(
              assert_line(it, "Loss.cu:250", "nll_loss_forward_reduce_cuda_kernel_2d", i, "t >= 0 && t < n_classes"));
          return f;
        }
        ++valid;
      }
      if (out == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      out[0] = static_cast<float>(valid);
      return f;
    }
    case KernelId::IndexSelect: {
      auto* out = reinterpret_cast<float*>(it.arg<CUdeviceptr>(0));
      auto* index = reinterpret_cast<const int64_t*>(it.arg<CUdeviceptr>(1));
      int32_t n = it.arg<int32_t>(2), src_size = it.arg<int32_t>(3);
      if (n > 0 && index == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      for (int32_t i = 0; i < n; ++i) {
        if (index[i] < 0 || index[i] >= src_size)
          f.lines.push_back(assert_line(it, "Indexing.cu:1231", "indexSelectSmallIndex", i,
                                        "srcIndex < srcSelectDimSize"));
      }
      if (!f.lines.empty()) {
        f.code = CUDA_ERROR_ASSERT;
        return f;
      }
      if (n > 0 && out == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      for (int32_t i = 0; i < n; ++i) out[i] = static_cast<float>(index[i]);
      return f;
    }
    case KernelId::IllegalAddress:
      return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
    case KernelId::FillF32: {
      auto* p = reinterpret_cast<float*>(it.arg<CUdeviceptr>(0));
      int32_t n = it.arg<int32_t>(1);
      float v = it.arg<float>(2);
      if (n > 0 && p == nullptr) return Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}};
      for (int32_t i = 0; i < n; ++i) p[i] = v;
      return f;
    }
    case KernelId::SleepUs:
      break;  // handled by the worker
  }
  return f;
}

// ---------------------------------------------------------------- launches

CUresult pack_args(const KernelDesc& k, void** params, void** extra, Item& it) {
  if (k.nparams == 0) return CUDA_SUCCESS;
  if (params != nullptr) {
    for (int i = 0; i < k.nparams; ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      memcpy(it.args + k.offsets[i], params[i], k.sizes[i]);
    }
    return CUDA_SUCCESS;
  }
  if (extra != nullptr) {
    void* buf = nullptr;
    size_t* size = nullptr;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
        buf = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = static_cast<size_t*>(extra[i + 1]);
      else
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (buf == nullptr || size == nullptr || *size < k.total) return CUDA_ERROR_INVALID_VALUE;
    memcpy(it.args, buf, k.total);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// What cuLaunchKernelEx's attributes ask of the sim: the PDL oracle's flag, and the events a launch records.
struct LaunchAttrs {
  bool programmatic = false;           // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, non-0
  CUevent events[2] = {nullptr, nullptr};  // PROGRAMMATIC_EVENT, LAUNCH_COMPLETION_EVENT
};

// A launch runs in its stream's context ("the context to launch the kernel on will either be taken from the
// specified stream hStream or the current context in case of NULL stream", cuda.h) and answers that context's state;
// a CUfunction must belong to it ("The CUDA context associated with this stream must match that associated with
// function f"; the sim's answer otherwise: CUDA_ERROR_INVALID_HANDLE). A current context is required all the same.
CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, CUstream h,
                void** params, void** extra, bool ptsz, const LaunchAttrs& attrs = {}) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_current == nullptr) {
    CUresult e = enter();
    return e != CUDA_SUCCESS ? e : CUDA_ERROR_INVALID_CONTEXT;
  }
  return on_stream(h, ptsz, true, [&](const StreamP& s) -> CUresult {
    const char* name = nullptr;
    CtxRef fctx;
    const KernelDesc* desc = launchable_locked(f, &name, &fctx);  // a CUfunction, or a CUkernel cast to one
    if (desc == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (fctx.ctx != nullptr && (fctx.ctx != s->ctx.ctx || fctx.id != s->ctx.id)) return CUDA_ERROR_INVALID_HANDLE;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bx > 1024 || by > 1024 || bz > 64 || uint64_t{bx} * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
    Item it;
    it.kind = Item::Kernel;
    it.k = desc;
    it.func = f;
    it.name = name;
    it.grid[0] = gx, it.grid[1] = gy, it.grid[2] = gz, it.block[0] = bx, it.block[1] = by, it.block[2] = bz;
    CUresult r = pack_args(*desc, params, extra, it);
    if (r != CUDA_SUCCESS) return r;
    Event* events[2] = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i)
      if (attrs.events[i] && !(events[i] = find_locked(&Sim::events, attrs.events[i])))
        return CUDA_ERROR_INVALID_HANDLE;
    if (attrs.programmatic) note_pdl_launch_locked(*s);
    if ((r = submit_locked(*s, std::move(it), attrs.programmatic, true)) != CUDA_SUCCESS) return r;
    // A programmatic or launch-completion event fires, at the latest, when the kernel ends: the sim records it there.
    for (Event* e : events)
      if (e && !s->capturing) {
        e->s = s;
        e->seq = s->submitted;
      }
    return CUDA_SUCCESS;
  });
}

CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool ptsz) {
  if (c == nullptr || (c->numAttrs > 0 && c->attrs == nullptr)) {
    CUresult r = enter();
    if (r == CUDA_SUCCESS && t_current == nullptr) r = CUDA_ERROR_INVALID_CONTEXT;
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
  }
  // Every attribute is accepted and passed by (cluster dimensions, memory-sync domain, priority, cooperative, ...: the
  // sim runs one block's worth of each kernel); the ones below change what the sim does or counts.
  LaunchAttrs attrs;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    const CUlaunchAttribute& a = c->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      attrs.programmatic = a.value.programmaticStreamSerializationAllowed != 0;
    else if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT)
      attrs.events[0] = a.value.programmaticEvent.event;
    else if (a.id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT)
      attrs.events[1] = a.value.launchCompletionEvent.event;
  }
  return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream, params,
                extra, ptsz, attrs);
}

}  // namespace sim

using namespace sim;

// ---- launches

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra, false);
}
SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra, true);
}
// The test-only "future" entry point (tests/sim/README.md): cuLaunchKernel as a driver newer than every header might
// give it at 13990, with one more argument that must arrive as 13990, and at its own address. Not exported: reached
// only through cuGetProcAddress with SIM_CUDA_DRIVER_VERSION >= 13990.
namespace sim {
CUresult future_launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra,
                              unsigned int futureCheck) {
  if (futureCheck != 13990) return CUDA_ERROR_INVALID_VALUE;  // an argument moved: the caller's prototype was wrong
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra, false);
}
}  // namespace sim

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}
SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}
SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void** kernelParams) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, nullptr,
                false);
}
SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                void** kernelParams) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, nullptr, true);
}
