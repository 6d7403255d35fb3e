// cdsa simulated CUDA driver (tests only): the driver version cuDriverGetVersion answers without
// SIM_CUDA_DRIVER_VERSION. Compiled once per library (tests/sim/CMakeLists.txt): the headers' CUDA_VERSION for
// build/lib/sim, the toolkit stub's version for build/lib/sim-stub.
#include "sim_internal.h"

namespace sim {
extern const int kDefaultDriverVersion = SIM_DEFAULT_DRIVER_VERSION;
}  // namespace sim
