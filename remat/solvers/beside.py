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
        self.procs: list[subprocess.Popen] = []
        self.folder = None
        try:
            self.folder = tempfile.TemporaryDirectory(prefix="remat-beside-")
            env = _environment()
            for k in range(1, count + 1):
                self.procs.append(self._start(target, {**job, "seed": job["seed"] + k}, k, env))
        except Exception as error:  # no folder or interpreter, a job that does not pickle
            warnings.warn(f"remat: no search beside this one: {error!r}", stacklevel=2)

    def _start(self, target: str, job: dict, k: int, env: dict) -> subprocess.Popen:
        """Helper k, its job in a file and its stderr in another (a pipe nobody reads
        while it runs would stop it once full)."""
        folder = Path(self.folder.name)
        (folder / f"job{k}").write_bytes(pickle.dumps((target, job)))
        with open(folder / f"err{k}", "wb") as err:
            return subprocess.Popen([sys.executable, "-m", "remat.solvers.beside",
                                     str(folder / f"job{k}")], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err)

    def results(self, until: float | None, stopped=lambda: False) -> list:
        """Each helper's result, waiting for it until ``until`` (``time.perf_counter()``;
        None: not at all) or ``stopped()`` (checked every ``POLL`` seconds: Ctrl-C);
        helpers still running then are stopped and give none."""
        found = []
        for k, proc in enumerate(self.procs, 1):
            out = self._wait(proc, until, stopped)
            if out is None:
                continue
            if proc.returncode == 0:
                found.append(pickle.loads(out))
            else:
                error = (Path(self.folder.name) / f"err{k}").read_text(errors="replace")
                warnings.warn(f"remat: a search beside this one failed: {error.strip()}",
                              stacklevel=2)
        self.stop()
        return found

    @staticmethod
    def _wait(proc: subprocess.Popen, until: float | None, stopped) -> bytes | None:
        """The stdout of ``proc`` once it ends, or None if it runs past ``until``."""
        while True:
            left = 0.0 if until is None or stopped() else until - time.perf_counter()
            try:
                return proc.communicate(timeout=max(0.0, min(left, POLL)))[0]
            except subprocess.TimeoutExpired:
                if left <= POLL:
                    return None

    def stop(self) -> None:
        """Stop every helper still running and remove the job files (again: nothing)."""
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
                proc.communicate()
        if self.folder is not None:
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
