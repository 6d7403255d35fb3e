"""Capture into an existing graph (cuStreamBeginCaptureToGraph, as JAX/XLA, cuda.core and PyTorch's conditional
nodes do), replay it, change its input, replay it again: the second replay faults."""
import ctypes

import simcuda as cu

lib = cu.lib
ctx, mod = cu.init()
index_select = cu.function(mod, "indexSelectSmallIndex")
s = cu.stream()
out = cu.alloc(4 * 64)
ids = cu.to_device([1, 2, 3, 4], ctypes.c_int64)


def capture():
    graph = cu.graph_create()
    cu.begin_capture_to_graph(s, graph)
    cu.launch(index_select, [ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(4), ctypes.c_int32(1000)], stream=s)  # CAPTURE-SITE
    assert cu.end_capture(s).value == graph.value  # the same graph, now holding the kernel
    return cu.instantiate(graph)


exe = capture()
cu.graph_launch(exe, s)  # FIRST-REPLAY
cu.stream_synchronize(s)
print("first replay ok", flush=True)
bad = (ctypes.c_int64 * 4)(1, 2, 1000, 4)
cu.check("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ids), bad, ctypes.c_size_t(32)))
cu.graph_launch(exe, s)  # LAUNCH-SITE
cu.stream_synchronize(s)  # SURFACE-SITE
