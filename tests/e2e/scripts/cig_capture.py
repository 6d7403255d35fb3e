"""CIG capture (cuStreamBeginCaptureToCig, CUDA 13.1): launches recorded into a graphics API's command list, which
runs when that API submits it, outside CUDA's streams. Here a fill is recorded on stream A (the simulated driver
never runs it), then a bad nll on stream B faults: the report must not name it as certain, since the recorded work
may have run and faulted (a real client submits it whenever it likes)."""
import ctypes

import simcuda as cu

lib = cu.lib
ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
a, b = cu.stream(), cu.stream()
buf, out = cu.alloc(64), cu.alloc(4)
labels = cu.to_device([3, 7, 10, 1], ctypes.c_int64)
cu.synchronize()


class CigParam(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("data", ctypes.c_void_p)]


class CigCaptureParams(ctypes.Structure):
    _fields_ = [("params", ctypes.POINTER(CigParam))]


param = CigParam(1, None)  # CIG_DATA_TYPE_D3D12_COMMAND_LIST; no list: the simulated driver runs nothing
cu.check("cuStreamBeginCaptureToCig", lib.cuStreamBeginCaptureToCig(a, ctypes.byref(CigCaptureParams(ctypes.pointer(param)))))
cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(1)], stream=a)  # CIG-SITE
cu.check("cuStreamEndCaptureToCig", lib.cuStreamEndCaptureToCig(a))
print("recorded", flush=True)
cu.launch(nll, cu.nll_args(out, labels, 4, 10), stream=b)  # LAUNCH-SITE
cu.stream_synchronize(b)  # SURFACE-SITE
