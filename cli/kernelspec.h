// Jupyter kernelspecs, as jupyter_client finds them: `cdsa jupyter install/uninstall` write and remove cdsa's,
// `cdsa doctor` lists them.
//
// A kernelspec is a directory KERNELS/NAME holding kernel.json; KERNELS is DATA/kernels for each Jupyter data
// directory DATA on the Jupyter path (jupyter_core.paths.jupyter_path): $JUPYTER_PATH's entries, the user's
// directory ($JUPYTER_DATA_DIR, else $XDG_DATA_HOME/jupyter, else ~/.local/share/jupyter), the Python's
// sys.prefix/share/jupyter, then /usr/local/share/jupyter and /usr/share/jupyter. The first NAME found wins.
// cdsa's kernelspecs carry "metadata": {"cdsa": {...}} in kernel.json; nothing else is cdsa's.
#pragma once

#include <string>
#include <vector>

namespace cdsa::cli {

// Kernel names as jupyter_client accepts them: [a-z0-9._-]+ (it lower-cases names first).
bool valid_kernel_name(const std::string& name);

// The user's Jupyter data directory by jupyter_core's rules on Linux (without JUPYTER_PLATFORM_DIRS).
std::string user_jupyter_data_dir();

// The kernels directories of the Jupyter path for a Python whose sys.prefix is `prefix` ("" when unknown), by
// jupyter_core's rules; used when that Python cannot tell (no jupyter_core).
std::vector<std::string> fallback_kernel_dirs(const std::string& prefix);

struct KernelSpec {
  std::string dir;           // KERNELS/NAME
  std::string name;          // NAME, lower-cased
  bool readable = false;     // kernel.json exists and is a JSON object
  bool cdsa = false;         // metadata.cdsa is an object
  std::string display_name;  // kernel.json's display_name
  std::vector<std::string> argv;
};

// KERNELS/NAME's kernelspec (readable false when there is no valid kernel.json).
KernelSpec read_kernel_spec(const std::string& dir);

// Every kernelspec in the kernels directory `kernels` (none when it does not exist), by name.
std::vector<KernelSpec> kernel_specs_in(const std::string& kernels);

}  // namespace cdsa::cli
