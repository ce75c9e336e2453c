"""Functions the tests of ``remat.solvers.beside`` run in helper processes (importable there
through PYTHONPATH, which ``Beside`` passes on)."""
import time


def sleep(seconds: float, seed: int) -> int:
    time.sleep(seconds)
    return seed
