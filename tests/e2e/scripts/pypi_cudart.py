"""Loads the cudart that PyTorch's wheels use (PyPI nvidia-cuda-runtime, CUDA 13:
nvidia/cu13/lib/libcudart.so.13) with ctypes and makes its first runtime call, which
fetches every driver entry point through cuGetProcAddress. Prints the library's path
and the call's result; exits 2 when the package is not installed."""
import ctypes
import pathlib
import sys


def find_cudart():
    for entry in sys.path:
        for cand in sorted(pathlib.Path(entry or ".").glob("nvidia/cu13/lib/libcudart.so.13")):
            return cand
    return None


path = find_cudart()
if path is None:
    print("nvidia-cuda-runtime (CUDA 13) is not installed")
    sys.exit(2)
rt = ctypes.CDLL(str(path))
count = ctypes.c_int(-1)
err = rt.cudaGetDeviceCount(ctypes.byref(count))
rt.cudaGetErrorName.restype = ctypes.c_char_p
print(f"{path}\ncudaGetDeviceCount: {rt.cudaGetErrorName(err).decode()}")
