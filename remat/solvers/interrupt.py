"""Ctrl-C during a solve: stop early and keep the best schedule found, instead of losing it.

Every method runs within ``catching()`` (``base.solver``): a first Ctrl-C is remembered
(``requested``) instead of raising, every loop that checks ``base.past`` then ends as if out
of time, a HiGHS solve (``highs_backend``) or CP-SAT search (``run_cancellable``) in progress
or started later is cancelled and returns what it has, and the method returns its best
schedule, marked (``base._stopped``: status "timeout", ``details["interrupted"]``). A second
Ctrl-C raises KeyboardInterrupt. A loop over solves (a sweep, ``remat solve --method all``,
the demo, the plan cache) asks ``caught_since`` after each and stops where one was cut short,
keeping the results so far.
"""
from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from typing import Callable, Iterator

_STOP = threading.Event()
_DEPTH = [0]  # nested catching() scopes
_LAST = [-math.inf]  # time.monotonic() of the last Ctrl-C a solve caught


def caught_since(moment: float) -> bool:
    """Whether a solve caught a Ctrl-C (and returned early) since ``time.monotonic()`` was
    ``moment``."""
    return _LAST[0] >= moment


def requested() -> bool:
    """Whether Ctrl-C asked the enclosing ``catching()`` scope to stop."""
    return _STOP.is_set()


def request() -> None:
    """Remember a Ctrl-C, where a ``catching()`` scope will act on it (else nothing)."""
    if _DEPTH[0] > 0:
        _STOP.set()


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """Within it, Ctrl-C (in the main thread) sets ``requested`` instead of raising; a
    second one raises KeyboardInterrupt."""
    in_main = threading.current_thread() is threading.main_thread()

    def on_sigint(signum, frame) -> None:
        if _STOP.is_set():
            raise KeyboardInterrupt
        _LAST[0] = time.monotonic()
        _STOP.set()

    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    if _DEPTH[0] == 0:
        _STOP.clear()
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1
        if _DEPTH[0] == 0:
            _STOP.clear()
        if in_main:
            signal.signal(signal.SIGINT, previous)


def run_cancellable(work: Callable[[], object], cancel: Callable[[], None]
                    ) -> tuple[object, bool]:
    """``work()`` in a worker thread, polled from this one: Ctrl-C (main thread), or a stop
    already ``requested``, calls ``cancel()`` once and waits for the work to end.
    (its result, whether it was interrupted). An exception in the work is raised here."""
    box: dict = {}
    interrupted = threading.Event()

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    def on_sigint(signum, frame) -> None:
        _LAST[0] = time.monotonic()
        interrupted.set()
        request()

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        cancelled = False
        while worker.is_alive():
            worker.join(0.1)
            if not cancelled and (interrupted.is_set() or requested()):
                cancel()
                cancelled = True
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    if "error" in box:
        raise box["error"]
    return box.get("result"), interrupted.is_set() or requested()
