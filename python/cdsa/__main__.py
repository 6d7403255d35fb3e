"""`python -m cdsa ARGS` and the `cdsa` console script: become the packaged CLI with the same arguments."""
import os
import sys

from cdsa import binary_path


def main() -> None:
    exe = binary_path()
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"cdsa: the packaged CLI {exe} is missing or not executable; reinstall cdsa\n")
        sys.exit(2)
    args = sys.argv[1:]
    # The doctor checks, and `jupyter install` writes a kernel for, the Python cdsa was installed into.
    wants_python = args[:1] == ["doctor"] or args[:2] in (["jupyter", "install"], ["jupyter", "uninstall"])
    if wants_python and "--python" not in args and "--" not in args:
        args += ["--python", sys.executable]
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: the command's pid, signals and exit status stay its own (as with the CLI itself).
    os.execv(exe, ["cdsa", *args])


if __name__ == "__main__":
    main()
