"""tools/check_layers.py on small trees: each rule it holds, broken once, is reported with file and line."""
import os
import subprocess
import sys

import pytest

CHECKER = os.environ.get("CHECK_LAYERS") or os.path.join(os.path.dirname(__file__), "../../../tools/check_layers.py")


def run(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "shim" / "common").mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, CHECKER, str(tmp_path)], capture_output=True, text=True)


@pytest.mark.parametrize("rel, include, why", [
    ("shim/record/launch.cc", "shim/fault/fault.h", "shim/fault is above it"),
    ("shim/record/launch.cc", "shim/intercept/lifecycle.h", "shim/intercept is above it"),
    ("shim/record/profile.h", "report/trace.h", "the launch stage stays out of report"),
    ("shim/common/log.cc", "shim/record/recorder.h", "shim/record is above it"),
    ("shim/stacks/native_stack.cc", "shim/record/recorder.h", "shim/record is above it"),
    ("shim/stacks/python_stack.h", "report/frames.h", "the launch stage stays out of report"),
    ("shim/common/thread_block.h", "shim/stacks/native_stack.h", "shim/stacks is above it"),
    ("shim/fault/fault.cc", "shim/intercept/interpose.h", "shim/intercept is above it"),
    ("report/trace.cc", "shim/common/config.h", "shim/common is above it"),
    ("base/io.cc", "symbolizer/module_map.h", "symbolizer is above it"),
    ("symbolizer/x.cc", "cli/commands.h", "cli is above it"),
])
def test_a_break_is_named(tmp_path, rel, include, why):
    r = run(tmp_path, {rel: f'#include <cstdio>\n#include "{include}"\n'})
    assert r.returncode == 1, r.stdout
    assert f"{rel}:2:" in r.stdout and include in r.stdout and why in r.stdout


@pytest.mark.parametrize("rel, line", [
    ("shim/record/assert_capture.cc", 'extern "C" CDSA_EXPORT int fputs(const char* s, FILE* f) { return 0; }'),
    ("shim/stacks/native_stack.cc", 'extern "C" __attribute__((visibility("default"))) int dlclose(void* h);'),
])
def test_an_export_below_intercept_is_named(tmp_path, rel, line):
    r = run(tmp_path, {rel: "#include <cstdio>\n" + line + "\n"})
    assert r.returncode == 1, r.stdout
    assert f"{rel}:2:" in r.stdout and "only shim/intercept interposes" in r.stdout


def test_a_table_that_includes_a_walker_is_named(tmp_path):
    r = run(tmp_path, {"shim/record/stack_table.cc": '#include <cstdio>\n#include "shim/stacks/python_stack.h"\n',
                       "shim/record/stack_capture.cc": '#include "shim/stacks/python_stack.h"\n'})
    assert r.returncode == 1, r.stdout
    assert "shim/record/stack_table.cc:2:" in r.stdout and "only shim/record/stack_capture.cc drives" in r.stdout
    assert "stack_capture.cc:" not in r.stdout.replace("only shim/record/stack_capture.cc", "")


def test_downward_and_same_layer_includes_pass(tmp_path):
    r = run(tmp_path, {
        "shim/intercept/interpose.cc": '#include "shim/fault/fault.h"\n#include "shim/record/launch.h"\n'
                                       '#include "shim/intercept/interpose.h"\n#include "cuda_entry_points.inc"\n',
        "shim/fault/fault.cc": '#include "shim/record/recorder.h"\n#include "report/trace.h"\n',
        "shim/record/launch.cc": '#include "shim/common/driver.h"\n#include "symbolizer/bundled_dlopen.h"\n',
        "shim/record/stack_capture.cc": '#include "shim/stacks/native_stack.h"\n',
        "shim/stacks/native_stack.cc": '#include "shim/common/log.h"\n#include "symbolizer/bundled_dlopen.h"\n',
        "shim/entry.cc": '#include "shim/intercept/interpose.h"\nextern "C" CDSA_EXPORT void cdsa_library_copy() {}\n',
        "shim/intercept/libc_hooks.cc": 'extern "C" CDSA_EXPORT int fputs(const char* s, FILE* f);\n',
        "cli/main.cc": '#include "shim/common/config.h"\n#include "cupti_tracer/decode.h"\n',
    })
    assert r.returncode == 0, r.stdout
    assert "every include follows the layer rules" in r.stdout


def test_a_tree_without_shim_is_refused(tmp_path):
    r = subprocess.run([sys.executable, CHECKER, str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert r.returncode != 0 and "usage" in r.stderr
