"""Coverage as a test, offline: the cuGetProcAddress requests of real runtimes (cudart 12.9, 13.0, 13.5 and
cuda-bindings 13.5.0, committed in tests/data/requests/ by tools/cuda_requests.py) replayed against libcdsa.so over
the simulated driver built from the same headers. Every request whose (name, version, flags) the table has comes
back wrapped with the exact typedef -- the one the headers name for it (entry_point_oracle.py), whose exported symbol
is the very function the driver handed back (the sim's SIM_CUDA_PROC_LOG) --; above the headers' version only when
the driver's answer there is the same function as at the headers' version (the ceiling). Each other request is
listed with its reason: thunk (above the ceiling, another function), exempt, or not in the driver."""
import collections
import pathlib
import re

import pytest

from conftest import ROOT, run_python
from entry_point_oracle import HEADER_VERSION, TYPEDEFS, expected, table_symbols

LISTS = sorted((ROOT / "tests" / "data" / "requests").glob("*.txt"))


def read_requests(path):
    return [tuple(int(x) if i else x for i, x in enumerate(l.split())) for l in path.read_text().splitlines()
            if l.strip() and not l.startswith("#")]


def replay(path, tmp_path, env=None):
    cdsa_log, sim_log = tmp_path / "cdsa.log", tmp_path / "sim.log"
    run = run_python("replay_requests.py", path, cwd=tmp_path,
                     env={"CDSA_DEBUG_ENTRY_POINTS": str(cdsa_log), "SIM_CUDA_PROC_LOG": str(sim_log), **(env or {})})
    assert run.rc == 0, run.out + run.err
    ours = {}
    for line in cdsa_log.read_text().splitlines():
        m = re.match(r"cuGetProcAddress (\S+) (\d+) (\d+) -> (\S+) (\S+)$", line)
        if m:
            ours.setdefault((m[1], int(m[2]), int(m[3])), (m[4], m[5]))
    driver = {}  # what the sim handed out: the exported name of its function, or None
    for line in sim_log.read_text().splitlines():
        m = re.match(r"(\S*) (-?\d+) (\d+) -> (-?\d+) \d+ (\S+)$", line)
        driver.setdefault((m[1] or "(empty)", int(m[2]), int(m[3])), m[5] if m[4] == "0" and m[5] != "-" else None)
    return run, ours, driver


def classify(requests, ours, driver):
    """{reason: [request]} and the list of requests that broke the rule."""
    table = table_symbols()
    out, wrong = collections.defaultdict(list), []
    for req in requests:
        name, version, flags = req
        selected, outcome = ours[req]
        got = driver[req]
        text = f"{name}@{version}/{flags}: cdsa {selected} {outcome}, the driver {got}"
        if outcome == "wrapped":
            want = expected(name, min(version, HEADER_VERSION), flags)
            same_below = version <= HEADER_VERSION or driver.get((name, HEADER_VERSION, flags)) == got
            if selected != want or table.get(selected) != got or not same_below:
                wrong.append(f"{text}; want {want} exported as {got}")
            out["wrapped"].append(req)
        elif outcome == "thunk":
            # Only above the headers' version, for another function than at the headers' version.
            if version <= HEADER_VERSION and name in TYPEDEFS or driver.get((name, HEADER_VERSION, flags)) == got:
                wrong.append(f"{text}: a thunk where the table's wrapper fits")
            out["thunk"].append(req)
        elif selected == "exempt" and outcome == "passed":
            out["exempt"].append(req)
        elif outcome.startswith("not-found") and got is None:
            out["not in the driver"].append(req)
        else:
            wrong.append(text)
    return out, wrong


@pytest.mark.parametrize("path", LISTS, ids=[p.stem for p in LISTS])
def test_every_request_of_a_real_runtime_comes_back_wrapped_with_its_typedef_or_says_why(tmp_path, path):
    requests = read_requests(path)
    assert len(requests) > 300, path
    run, ours, driver = replay(path, tmp_path)
    missing = [r for r in requests if r not in ours or r not in driver]
    assert not missing, f"requests neither cdsa nor the driver logged: {missing[:5]}"
    out, wrong = classify(requests, ours, driver)
    assert not wrong, "\n".join(wrong)
    counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(out.items()))
    print(f"{path.stem}: {len(requests)} requests: {counts}")
    for reason in ("thunk", "not in the driver"):
        for name, version, flags in out.get(reason, []):
            print(f"  {reason}: {name} {version} {flags}")
    assert len(out["wrapped"]) > 0.9 * sum(r[1] <= HEADER_VERSION for r in requests), counts


def test_cuda_bindings_asks_for_the_two_abi_changes_above_13000_and_gets_their_own_prototypes(tmp_path):
    """cuda-bindings 13.5 asks cuLaunchHostFunc at 13020 and the multicast binds at 13010: with headers of 13.1 or
    newer, the wrappers of the 13010 typedefs (exported as the _v2 functions); with older ones, thunks."""
    path = ROOT / "tests" / "data" / "requests" / "cuda-bindings-13.5.0.txt"
    requests = read_requests(path)
    abi = [("cuLaunchHostFunc", 13020, 0), ("cuMulticastBindMem", 13010, 0), ("cuMulticastBindAddr", 13010, 0)]
    assert all(r in requests for r in abi), abi
    _, ours, driver = replay(path, tmp_path)
    for req in abi:
        if HEADER_VERSION >= 13010:
            assert ours[req] == (f"PFN_{req[0]}_v13010", "wrapped"), (req, ours[req])
            assert driver[req] == f"{req[0]}_v2", driver[req]
        else:
            assert ours[req][1] == "thunk", (req, ours[req])
