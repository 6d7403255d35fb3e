"""How a cdsa report is cut out of a program's stderr: one rule for the GPU suite (suite.py, beside this file) and
the simulated-driver end-to-end tests (tests/e2e/conftest.py). Standard library only."""

BANNER = "cdsa: asynchronous CUDA fault"


def dedent(text):
    """Every line stripped (the report indents frames; the checks compare text)."""
    return "\n".join(line.strip() for line in text.splitlines())


def report_block(err):
    """The first report in ERR, from its banner to the closing ===== line, dedented; "" when there is none."""
    i = err.find(BANNER)
    if i < 0:
        return ""
    j = err.find("\n=====", i + len(BANNER) + 30)
    return dedent(err[i:j if j > 0 else len(err)])
