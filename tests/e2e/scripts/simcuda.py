"""A small ctypes client of the CUDA driver API, for the end-to-end tests.

It talks to whatever libcuda.so.1 the loader finds (the simulated driver in
tests). SIMCUDA_DLL=pydll loads it with ctypes.PyDLL (GIL kept during calls);
the default ctypes.CDLL releases the GIL around every call, as PyTorch does.
"""
import ctypes
import os
import sys

_loader = ctypes.PyDLL if os.environ.get("SIMCUDA_DLL") == "pydll" else ctypes.CDLL
lib = _loader("libcuda.so.1")

CUresult = ctypes.c_int
ptr = ctypes.c_void_p


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
