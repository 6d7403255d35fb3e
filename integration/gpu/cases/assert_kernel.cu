// Cases 16 and 16b: the kernels that driver_api.c loads as PTX (nvcc -ptx) with cuModuleLoadData.
#include <cassert>
extern "C" __global__ void driver_assert_kernel(int bad) { assert(bad == 0); }
// Case 16b: the kernel launched first from the module that is then unloaded (driver_api KERNEL.ptx reload).
extern "C" __global__ void driver_other_kernel(int bad) {
  if (bad == 12345) __trap();  // never: only its name matters
}
