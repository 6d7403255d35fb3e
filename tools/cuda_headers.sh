#!/usr/bin/env bash
# Installs the pinned CUDA header set into .cuda-headers/<release>/include of this checkout (git-ignored), where
# CMake's CDSA_CUDA_HEADERS finds it: cuda.h, cudaTypedefs.h and the GL/EGL/VDPAU/Profiler typedef headers from
# PyPI's nvidia-cuda-runtime, cudaProfiler.h from nvidia-cuda-profiler-api, the CUPTI headers from
# nvidia-cuda-cupti, all of one CUDA release. Only the headers are kept (pip download --no-deps, then the wheels'
# nvidia/cu13/include/ is extracted); nothing is installed into any Python. Idempotent: a complete set of the
# pinned versions is left as it is. Run by tools/setup.sh; CUDA_HEADERS_DIR=<dir> puts the set elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
release=13.5
pins=(nvidia-cuda-runtime==13.5.37 nvidia-cuda-cupti==13.5.25 nvidia-cuda-profiler-api==13.5.25)
dest=${CUDA_HEADERS_DIR:-.cuda-headers}/$release
stamp="$dest/pins.txt"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ] && [ -f "$dest/include/cuda.h" ]; then
  exit 0
fi
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "tools/cuda_headers.sh: fetching the CUDA $release headers (${pins[*]})"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp/wheels" "${pins[@]}"
rm -rf "$dest.new" && mkdir -p "$dest.new/include"
"$PY" - "$tmp/wheels" "$dest.new/include" <<'PYEOF'
import glob, os, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
prefix = "nvidia/cu13/include/"
n = 0
for w in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
    with zipfile.ZipFile(w) as z:
        for m in z.infolist():
            if m.filename.startswith(prefix) and not m.is_dir():
                target = os.path.join(out, m.filename[len(prefix):])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with z.open(m) as src, open(target, "wb") as dst:
                    dst.write(src.read())
                n += 1
for h in ("cuda.h", "cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaProfiler.h", "cupti.h"):
    if not os.path.exists(os.path.join(out, h)):
        sys.exit(f"tools/cuda_headers.sh: the wheels have no {h}")
print(f"tools/cuda_headers.sh: {n} headers")
PYEOF
echo "${pins[*]}" > "$dest.new/pins.txt"
rm -rf "$dest" && mv "$dest.new" "$dest"
echo "tools/cuda_headers.sh: installed into $dest/include"
