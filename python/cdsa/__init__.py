"""cdsa: names the CUDA kernel launch behind an asynchronous CUDA fault.

This package carries the native tool: ``bin/cdsa`` (the CLI), ``lib/libcdsa.so`` (the preload library) and
``lib/vendor/`` (the libunwind and libdw it loads). The ``cdsa`` command and ``python -m cdsa`` run the CLI.

The fault report as data (docs/python.md): ``cdsa.last_report()`` (this process's) and ``cdsa.load_trace(path)``.
"""
import os

from cdsa._report import Candidate, Frame, NativeFrame, Report, last_report, load_trace  # noqa: F401

try:
    from importlib.metadata import version as _version

    __version__ = _version("cdsa")  # from CMakeLists.txt's project(VERSION), through pyproject.toml
except Exception:  # running from a source tree that was never installed
    __version__ = "unknown"

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def binary_path() -> str:
    """The cdsa CLI inside the installed package."""
    return os.path.join(PACKAGE_DIR, "bin", "cdsa")


def library_path() -> str:
    """libcdsa.so inside the installed package (what `cdsa run` preloads)."""
    return os.path.join(PACKAGE_DIR, "lib", "libcdsa.so")
