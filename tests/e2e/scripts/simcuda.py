"""A small ctypes client of the CUDA driver API, for the end-to-end tests.

It talks to whatever libcuda.so.1 the loader finds (the simulated driver in
tests). SIMCUDA_DLL=pydll loads it with ctypes.PyDLL (GIL kept during calls);
the default ctypes.CDLL releases the GIL around every call, as PyTorch does.
SIMCUDA_DEEPBIND=1 loads it with RTLD_NOW | RTLD_DEEPBIND: its own stdio calls then bind to libc first.
"""
import ctypes
import os
import sys

_loader = ctypes.PyDLL if os.environ.get("SIMCUDA_DLL") == "pydll" else ctypes.CDLL
if os.environ.get("SIMCUDA_DEEPBIND") == "1":
    lib = _loader("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_DEEPBIND)
else:
    lib = _loader("libcuda.so.1")

CUresult = ctypes.c_int
ptr = ctypes.c_void_p


def as_pytorch():
    """Loads the stand-in for PyTorch's libc10_cuda.so (tests/sim/fake_c10_cuda.c, built beside the sim in
    lib/sim/fake_torch/, found through LD_LIBRARY_PATH's sim directory): a script that stands for a PyTorch program
    calls it, so that cdsa sees PyTorch in the process, as it would in PyTorch's."""
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        p = os.path.join(d, "fake_torch", "libc10_cuda.so")
        if d and os.path.exists(p):
            ctypes.CDLL(p)
            return
    raise RuntimeError("simcuda.as_pytorch: no fake_torch/libc10_cuda.so beside the simulated driver")


class CudaError(RuntimeError):
    def __init__(self, call, code):
        name = ctypes.c_char_p()
        lib.cuGetErrorName(code, ctypes.byref(name))
        self.code = code
        self.name = (name.value or b"?").decode()
        super().__init__(f"CUDA error: {call} returned {code} {self.name}")


def check(call, code):
    if code != 0:
        raise CudaError(call, code)


def init():
    check("cuInit", lib.cuInit(0))
    dev = ctypes.c_int()
    check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ptr()
    check("cuDevicePrimaryCtxRetain", lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", lib.cuCtxSetCurrent(ctx))
    mod = ptr()
    check("cuModuleLoadData", lib.cuModuleLoadData(ctypes.byref(mod), b"any image"))
    return ctx, mod


def set_current(ctx):
    check("cuCtxSetCurrent", lib.cuCtxSetCurrent(ctx))


def function(mod, name):
    f = ptr()
    check("cuModuleGetFunction", lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()))
    return f


def alloc(nbytes):
    d = ctypes.c_uint64()
    check("cuMemAlloc_v2", lib.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(nbytes)))
    return d.value


def to_device(values, ctype):
    arr = (ctype * len(values))(*values)
    d = alloc(ctypes.sizeof(arr))
    check("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2(ctypes.c_uint64(d), arr, ctypes.c_size_t(ctypes.sizeof(arr))))
    return d


def from_device(d, n, ctype):
    """A synchronous copy back: the call that surfaces asynchronous faults."""
    arr = (ctype * n)()
    code = lib.cuMemcpyDtoH_v2(arr, ctypes.c_uint64(d), ctypes.c_size_t(ctypes.sizeof(arr)))
    check("cuMemcpyDtoH_v2", code)
    return list(arr)


def stream():
    s = ptr()
    check("cuStreamCreate", lib.cuStreamCreate(ctypes.byref(s), 0))
    return s


def launch(f, args, stream=None, grid=(1, 1, 1), block=(32, 1, 1)):
    """args: list of ctypes values, passed the cuLaunchKernel way."""
    holders = list(args)
    params = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in holders])
    code = lib.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, stream,
                              params if holders else None, None)
    check("cuLaunchKernel", code)


def nll_args(out, target, n, n_classes, ignore_index=-100):
    return [ctypes.c_uint64(out), ctypes.c_uint64(target), ctypes.c_int32(n), ctypes.c_int32(n_classes),
            ctypes.c_int64(ignore_index)]


def synchronize():
    check("cuCtxSynchronize", lib.cuCtxSynchronize())


def stream_synchronize(s):
    check("cuStreamSynchronize", lib.cuStreamSynchronize(s))


# ---- the paths the real CUDA 13 runtime takes -------------------------------------------------------------------

_library = None


def library_kernel(name):
    """A CUkernel, as cudart 12+/13 gets it: cuLibraryLoadData + cuLibraryGetKernel. cudart launches it cast to
    CUfunction, so pass it to launch() as is."""
    global _library
    if _library is None:
        _library = ptr()
        check("cuLibraryLoadData", lib.cuLibraryLoadData(ctypes.byref(_library), b"fatbin", None, None, 0, None, None, 0))
    k = ptr()
    check("cuLibraryGetKernel", lib.cuLibraryGetKernel(ctypes.byref(k), _library, name.encode()))
    return k


def proc_address(name, version, flags=0):
    """What cuGetProcAddress_v2 returns for (name, version, flags), as an int address."""
    fn = ptr()
    status = ctypes.c_int()
    check(f"cuGetProcAddress_v2({name}, {version})",
          lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(flags), ctypes.byref(status)))
    return fn.value


def synchronize_v2():
    """cudaDeviceSynchronize in CUDA 13: the cuCtxSynchronize that cuGetProcAddress_v2 gives at 13000, i.e.
    cuCtxSynchronize_v2(CUcontext), called with NULL (the current context)."""
    fn = ctypes.CFUNCTYPE(CUresult, ptr)(proc_address("cuCtxSynchronize", 13000))
    check("cuCtxSynchronize_v2", fn(None))


def graph_create():
    g = ptr()
    check("cuGraphCreate", lib.cuGraphCreate(ctypes.byref(g), 0))
    return g


def begin_capture_to_graph(s, graph, mode=0):
    """cuStreamBeginCaptureToGraph(s, graph, no dependencies, mode): capture into an existing graph."""
    check("cuStreamBeginCaptureToGraph", lib.cuStreamBeginCaptureToGraph(s, graph, None, None, ctypes.c_size_t(0), mode))


def end_capture(s):
    g = ptr()
    check("cuStreamEndCapture", lib.cuStreamEndCapture(s, ctypes.byref(g)))
    return g


def instantiate(graph):
    exe = ptr()
    check("cuGraphInstantiateWithFlags", lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)))
    return exe


def graph_launch(exe, s):
    check("cuGraphLaunch", lib.cuGraphLaunch(exe, s))
