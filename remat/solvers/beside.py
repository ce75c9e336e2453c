"""Searches beside the caller's: the same search, other seeds, in other processes.

retention's search (``retention._searched``) is Python on one core, and where a deadline
cuts it its result depends on the seed more than on anything else: on six rows of the
benchmark, from the same start and with the same work, five seeds ended up to 5% apart
(bench/results/fast_notes.md, session 37). Helpers run the same search with other seeds
on the cores it leaves idle, and the cheapest schedule of all wins.

Each helper is a fresh interpreter (``python -m remat.solvers.beside JOB``), not a
``multiprocessing`` child: spawn and forkserver import the caller's ``__main__`` again, so
a script that calls ``remat.solve`` without a main guard would start itself over, and fork
copies the threads of HiGHS and torch. The job goes in a pickled file; the result comes
back pickled on the helper's stdout (the helper's own prints go to its stderr). A helper
ignores Ctrl-C (the terminal sends it to the whole process group): the caller stops it.
A helper that fails gives no result and a warning with its error.
"""
from __future__ import annotations

import os
import pickle
import signal
import site
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

GRACE = 1.0
"""Seconds past the caller's deadline that it waits for a helper's result (a helper checks
its deadline between moves; one move takes milliseconds to a HiGHS knapsack's 2 s)."""

POLL = 0.1
"""Seconds between two looks at ``stopped`` while waiting for a helper."""


class Beside:
    """``count`` helpers running ``job`` (keyword arguments of ``target``, a function
    ``module:name`` that returns a picklable result), each with ``seed`` replaced by
    ``seed + k`` (k = 1..count). ``results`` collects them."""

    def __init__(self, target: str, job: dict, count: int):
        self.folder = tempfile.TemporaryDirectory(prefix="remat-beside-")
        self.procs: list[subprocess.Popen] = []
        env = _environment()
        for k in range(1, count + 1):
            path = Path(self.folder.name) / f"job{k}.pickle"
            path.write_bytes(pickle.dumps((target, {**job, "seed": job["seed"] + k})))
            try:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "remat.solvers.beside", str(path)], env=env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            except OSError as error:  # no interpreter to start: the caller's search alone
                warnings.warn(f"remat: no search beside this one: {error}", stacklevel=2)
                break

    def results(self, until: float | None, stopped=lambda: False) -> list:
        """Each helper's result, waiting for it until ``until`` (``time.perf_counter()``;
        None: not at all) or ``stopped()`` (checked every ``POLL`` seconds: Ctrl-C);
        helpers still running then are stopped and give none."""
        found = []
        for proc in self.procs:
            out = self._wait(proc, until, stopped)
            if out is None:
                continue
            if proc.returncode == 0:
                found.append(pickle.loads(out[0]))
            else:
                warnings.warn("remat: a search beside this one failed: "
                              f"{out[1].decode(errors='replace').strip()}", stacklevel=2)
        self.stop()
        return found

    @staticmethod
    def _wait(proc: subprocess.Popen, until: float | None, stopped) -> tuple | None:
        """(stdout, stderr) of ``proc`` once it ends, or None if it runs past ``until``."""
        while True:
            left = 0.0 if until is None or stopped() else until - time.perf_counter()
            try:
                return proc.communicate(timeout=max(0.0, min(left, POLL)))
            except subprocess.TimeoutExpired:
                if left <= POLL:
                    return None

    def stop(self) -> None:
        """Stop every helper still running and remove the job files (again: nothing)."""
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
                proc.communicate()
        self.folder.cleanup()


def _environment() -> dict:
    """The caller's environment, with the folder that holds this ``remat`` first on
    PYTHONPATH (a script may have put it on ``sys.path`` itself), unless it is a site
    folder, which every interpreter reads anyway (and put first, would come before the
    standard library)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    if root not in site.getsitepackages() + [site.getusersitepackages()]:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _main(path: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller stops its helpers
    out, sys.stdout = sys.stdout.buffer, sys.stderr
    target, job = pickle.loads(Path(path).read_bytes())
    module, name = target.split(":")
    __import__(module)
    result = getattr(sys.modules[module], name)(**job)
    out.write(pickle.dumps(result))
    out.flush()


if __name__ == "__main__":
    _main(sys.argv[1])
