"""What the benchmark scripts share: the environment of a measured child process and callgrind's total."""
import os


def child_env(build=None, preload=None):
    """This environment without cdsa's settings or preloads; with `build`, its simulated driver as the library
    path; with `preload`, that libcdsa.so preloaded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDSA_") and k != "LD_PRELOAD"}
    if build:
        env["LD_LIBRARY_PATH"] = str(build / "lib" / "sim")
    if preload:
        env["LD_PRELOAD"] = str(preload)
    return env


def callgrind_total(out_file):
    """The instructions a callgrind output file counts in all (its summary: or totals: line)."""
    total = 0
    with open(out_file) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    return total


def cpu_model():
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
