"""Ctrl-C during a solve: stop early and keep the best schedule found, instead of losing it.

Every method runs within ``catching()`` (``base.solver``): a first Ctrl-C is
remembered (``requested``) instead of raising, every loop that checks ``base.past`` then ends
as if out of time, a HiGHS solve (``highs_backend``) or CP-SAT search (``run_cancellable``)
in progress or started later is cancelled and returns what it has, and the method returns its
best schedule, marked (``base._stopped``: status "timeout", ``details["interrupted"]``). A
second Ctrl-C raises KeyboardInterrupt, except while HiGHS or CP-SAT runs: there it cancels
again and the run ends at the backend's next check. A loop over solves (a sweep, ``remat
solve --method all``, the demo) stops after a result marked interrupted, keeping the results
so far. chain-dp's C code checks for signals but cannot read the flag: around it
``stopping`` turns a Ctrl-C into chain-dp's own "out of time" (its Python recursion reads
``past``). The flag is shared by all threads (solves run in the main thread; chain-dp's
``Ahead`` thread never enters a scope, and auto stops it).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator

_STOP = threading.Event()
_DEPTH = [0]  # nested catching() scopes


def requested() -> bool:
    """Whether Ctrl-C asked the enclosing ``catching()`` scope to stop."""
    return _STOP.is_set()


def _request() -> None:
    """Remember a Ctrl-C, where a ``catching()`` scope will act on it (else nothing)."""
    if _DEPTH[0] > 0:
        _STOP.set()


@contextlib.contextmanager
def _sigint(handler) -> Iterator[None]:
    """``handler`` for SIGINT while inside (main thread only: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:  # (a signal pending at the swap runs ``handler`` at once: it may raise)
        signal.signal(signal.SIGINT, handler)
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """Within it, Ctrl-C (in the main thread) sets ``requested`` instead of raising; a
    second one raises KeyboardInterrupt."""
    def on_sigint(signum, frame) -> None:
        if _STOP.is_set():
            raise KeyboardInterrupt
        _STOP.set()

    if _DEPTH[0] == 0:
        _STOP.clear()
    _DEPTH[0] += 1
    try:
        with _sigint(on_sigint):  # installed after the clear, restored before the next one
            yield
    finally:
        _DEPTH[0] -= 1
        if _DEPTH[0] == 0:
            _STOP.clear()


@contextlib.contextmanager
def stopping(error: type[Exception]) -> Iterator[None]:
    """Within a ``catching()`` scope, around native code that checks for signals but cannot
    read ``requested`` (chain-dp's C recursions and least-peak tables): a Ctrl-C there, or one
    requested before it starts, raises ``error``, which the caller treats as out of time.
    Outside any scope nothing changes (Ctrl-C raises KeyboardInterrupt)."""
    if _DEPTH[0] == 0:
        yield
        return
    raised = []

    def on_sigint(signum, frame) -> None:
        _STOP.set()
        if not raised:  # once: another Ctrl-C while ``error`` unwinds only sets the flag
            raised.append(True)
            raise error

    with _sigint(on_sigint):
        if _STOP.is_set():  # requested before, or as the handler went in
            raised.append(True)
            raise error
        yield


def run_cancellable(work: Callable[[], object], cancel: Callable[[], None]
                    ) -> tuple[object, bool]:
    """``work()`` in a worker thread, polled from this one: while Ctrl-C (main thread) or a
    stop ``requested`` holds, ``cancel()`` on every poll (a cancel sent before the backend
    started its run may be lost: highspy's ``startSolve`` clears it, CP-SAT's ``stop_search``
    needs a search), then wait for the work to end. (its result, whether it was
    interrupted). An exception in the work is raised here."""
    box: dict = {}
    interrupted = threading.Event()

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    def on_sigint(signum, frame) -> None:
        interrupted.set()
        _request()

    worker = threading.Thread(target=run, daemon=True)
    with _sigint(on_sigint):
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            if interrupted.is_set() or requested():
                cancel()
    if "error" in box:
        raise box["error"]
    return box.get("result"), interrupted.is_set() or requested()
