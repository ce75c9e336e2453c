"""Searches beside the caller's: the same search, other seeds, in other processes.

retention's search (``retention._searched``) is Python on one core, and its result depends
on the seed more than on the search rules tried: on six rows of the benchmark, from the same
start and with the same work, five seeds ended up to 5.4% apart (bench/results/fast_notes.md,
session 37). Helpers run the same search with other seeds
on the cores it leaves idle, and the cheapest schedule of all wins.

Each helper is a fresh interpreter (``python -m remat.solvers.beside FOLDER K``), not a
``multiprocessing`` child: spawn and forkserver import the caller's ``__main__`` again, so
a script that calls ``remat.solve`` without a main guard would start itself over, and fork
copies the threads of HiGHS and torch. The job goes in a pickled file, the result comes
back in another (not on a pipe: C code such as HiGHS's banner writes to stdout, and a full
pipe stops a helper until it is read), its stderr in a third. A helper runs in a session of
its own, so Ctrl-C at the terminal reaches only the caller, which stops it (a caller killed
outright leaves its helpers to end at their deadline). A helper that fails gives no result
and a warning with its error.
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
    """``count`` helpers, each calling ``target`` (a function ``module:name`` that returns
    a picklable result) with the keyword arguments ``job`` and ``helper=k`` (k = 1..count);
    ``results`` collects them and ends them, as ``stop`` does."""

    def __init__(self, target: str, job: dict, count: int):
        self.procs: list[subprocess.Popen] = []
        self.folder = None
        try:
            self.folder = tempfile.TemporaryDirectory(prefix="remat-beside-")
            self._file("job").write_bytes(pickle.dumps((target, job)))
            env = _environment()
            for k in range(1, count + 1):
                with open(self._file("err", k), "wb") as err:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "remat.solvers.beside", self.folder.name, str(k)],
                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=err, start_new_session=True))
        except Exception as error:  # no folder or interpreter, a job that does not pickle
            warnings.warn(f"remat: no search beside this one: {error!r}", stacklevel=2)
        except BaseException:  # a second Ctrl-C: no helper left behind
            self.stop()
            raise

    def _file(self, kind: str, k: int | None = None) -> Path:
        return Path(self.folder.name) / (kind if k is None else f"{kind}{k}")

    def results(self, until: float | None, stopped=lambda: False) -> list:
        """Each helper's result, waiting for it until ``until`` (``time.perf_counter()``;
        None: not at all) or ``stopped()`` (checked every ``POLL`` seconds: Ctrl-C);
        helpers still running then are stopped and give none."""
        found = []
        for k, proc in enumerate(self.procs, 1):
            if not _ended(proc, until, stopped):
                continue
            try:
                if proc.returncode != 0:
                    raise RuntimeError(self._file("err", k).read_text(errors="replace").strip())
                found.append(pickle.loads(self._file("out", k).read_bytes()))
            except Exception as error:
                warnings.warn(f"remat: a search beside this one failed: {error}", stacklevel=2)
        self.stop()
        return found

    def stop(self) -> None:
        """Stop every helper still running and remove the files (again: nothing)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self.folder is not None:
            self.folder.cleanup()


def _ended(proc: subprocess.Popen, until: float | None, stopped) -> bool:
    """Whether ``proc`` ends by ``until`` (None: has ended) unless ``stopped()`` first."""
    while proc.poll() is None:
        left = 0.0 if until is None or stopped() else until - time.perf_counter()
        if left <= 0:
            return False
        try:
            proc.wait(timeout=min(left, POLL))
        except subprocess.TimeoutExpired:
            pass
    return True


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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


def _main(folder: str, k: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller stops its helpers, not Ctrl-C
    target, job = pickle.loads((Path(folder) / "job").read_bytes())
    module, name = target.split(":")
    __import__(module)
    result = getattr(sys.modules[module], name)(**job, helper=int(k))
    (Path(folder) / f"out{k}").write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    _main(*sys.argv[1:])
