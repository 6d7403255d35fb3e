"""Case 27 (info): the PCI bus id of device 0 as the driver (cuDeviceGetPCIBusId, the string cdsa's report header
prints), nvidia-smi and torch tell it. One line each, read by check_pci_bus_id in suite_checks.py:
    pci-driver rc R id ID        (ID: the driver's string as given, or '-')
    pci-smi ID | pci-smi none: WHY
    pci-torch VALUE | pci-torch none: WHY
Runs without cdsa; it does not fault."""
import ctypes
import shutil
import subprocess
import sys

try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(f"pci-driver none: {e}", flush=True)
    sys.exit(1)
rc = cu.cuInit(0)
dev = ctypes.c_int(0)
if rc == 0:
    rc = cu.cuDeviceGet(ctypes.byref(dev), 0)
buf = ctypes.create_string_buffer(64)
if rc == 0:
    rc = cu.cuDeviceGetPCIBusId(buf, len(buf) - 1, dev)
print(f"pci-driver rc {rc} id {buf.value.decode(errors='replace') or '-' if rc == 0 else '-'}", flush=True)

smi = shutil.which("nvidia-smi")
if smi:
    try:
        p = subprocess.run([smi, "-i", "0", "--query-gpu=pci.bus_id", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
        got = p.stdout.strip().splitlines()
        print(f"pci-smi {got[0].strip()}" if p.returncode == 0 and got else
              f"pci-smi none: rc {p.returncode} {' '.join((p.stdout + p.stderr).split())[:80]}", flush=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"pci-smi none: {e}", flush=True)
else:
    print("pci-smi none: no nvidia-smi", flush=True)

try:
    import torch
    props = torch.cuda.get_device_properties(0)
    print(f"pci-torch {getattr(props, 'pci_bus_id', 'none: no pci_bus_id attribute')!r} domain "
          f"{getattr(props, 'pci_domain_id', '-')!r} device {getattr(props, 'pci_device_id', '-')!r}", flush=True)
except Exception as e:  # no torch, or torch without CUDA: a fact, not a crash
    print(f"pci-torch none: {type(e).__name__}: {' '.join(str(e).split())[:80]}", flush=True)
