"""Functions the tests of ``remat.solvers.beside`` run in helper processes (importable there
through PYTHONPATH, which ``Beside`` passes on)."""
import os
import sys
import time


def sleep(seconds: float, helper: int) -> int:
    time.sleep(seconds)
    return helper


def noisy(helper: int) -> int:
    """Writes to stdout, from Python and below it (as C code does), then returns."""
    print("x" * 100_000)
    sys.stdout.flush()
    os.write(1, b"y" * 100_000)
    return helper
