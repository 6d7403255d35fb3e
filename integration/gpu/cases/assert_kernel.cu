// Case 16: the kernel that driver_api.c loads as PTX (nvcc -ptx) with cuModuleLoadData.
#include <cassert>
extern "C" __global__ void driver_assert_kernel(int bad) { assert(bad == 0); }
