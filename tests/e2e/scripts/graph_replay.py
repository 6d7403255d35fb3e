"""A kernel captured into a graph faults on a later replay, after its input changed."""
import ctypes

import simcuda as cu

lib = cu.lib
ctx, mod = cu.init()
index_select = cu.function(mod, "indexSelectSmallIndex")
s = cu.stream()
out = cu.alloc(4 * 64)
ids = cu.to_device([1, 2, 3, 4], ctypes.c_int64)


def capture():
    cu.check("cuStreamBeginCapture_v2", lib.cuStreamBeginCapture_v2(s, 0))
    cu.launch(index_select, [ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(4), ctypes.c_int32(1000)], stream=s)  # CAPTURE-SITE
    graph = ctypes.c_void_p()
    cu.check("cuStreamEndCapture", lib.cuStreamEndCapture(s, ctypes.byref(graph)))
    exe = ctypes.c_void_p()
    cu.check("cuGraphInstantiateWithFlags", lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)))
    return exe


exe = capture()
cu.check("cuGraphLaunch", lib.cuGraphLaunch(exe, s))  # FIRST-REPLAY
cu.stream_synchronize(s)
bad = (ctypes.c_int64 * 4)(1, 2, 1000, 4)
cu.check("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ids), bad, ctypes.c_size_t(32)))
cu.check("cuGraphLaunch", lib.cuGraphLaunch(exe, s))  # LAUNCH-SITE
cu.stream_synchronize(s)  # SURFACE-SITE
