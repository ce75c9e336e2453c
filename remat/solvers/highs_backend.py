"""The HiGHS backend: receives arrays, returns numbers. Knows nothing about schedules.

Ctrl-C during a solve cancels HiGHS (through its interrupt callback) and returns the best
solution found so far, flagged ``interrupted``; the caller reports it with status "timeout".
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from remat.solvers.interrupt import run_cancellable


CLOSED_GAP = 1e-9
"""A relative gap at most this is left for HiGHS to close (status "optimal"), not settled."""

JUMP_SECONDS_PER_NONZERO = 4e-6
"""The least time limit, per nonzero of the matrix, with which an integer program runs
HiGHS's feasibility-jump heuristic (below it ``run``'s ``jump`` is ignored). The heuristic
runs before the root LP and checks the limit only as it starts: random_dag(500) at 10%, in
auto with 1 s, its knapsacks (248897 and 252939 nonzeros) given 0.10 and 0.45 s returned
after 0.62 and 0.75 s with it, 0.19 and 0.57 s without (bench/results/fast_notes.md,
session 33)."""

ROOT_HEURISTIC = "mip_heuristic_run_root_reduced_cost"
"""The HiGHS option of its root reduced-cost heuristic: a sub-MIP at the root that can run
seconds past the time limit (HiGHS 1.16; a version without the option runs it). The staged
gap model of a 12-layer GPT-2 at op level, 30% (60792 columns, 338991 nonzeros), given
11.3-11.4 s by auto's last bound, returned after 13.4-14.1 s with it (the sub-MIP ran from
3.3 s to 13.5 s in HiGHS's log) and 11.5 s without, with the same bound
(``bounds.retention_bound`` turns it off where its caller holds a schedule;
bench/results/fast_notes.md, session 34)."""


@dataclass
class BackendResult:
    """What HiGHS found: ``x`` is the best solution vector (None if none), ``bound`` the
    proven lower bound on the objective, in the model's units."""

    status: str  # "optimal" | "infeasible" | "timeout" | "interrupted" | "stopped" |
    # "settled" | "error"
    x: np.ndarray | None
    objective: float
    bound: float
    seconds: float


def _highspy():
    try:
        import highspy
    except ImportError as exc:  # pragma: no cover - highspy is a core dependency
        raise ImportError("the MILP and LP methods need highspy: pip install highspy") from exc
    return highspy


def _new_highs(highspy, verbose: bool):
    """A Highs instance; without ``verbose`` its copyright banner (printed by the C++
    constructor straight to file descriptor 1) does not reach the user's stdout."""
    import os
    import sys

    if verbose:
        return highspy.Highs()
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def run(arrays: dict, time_limit: float | None = None, mip_rel_gap: float = 0.0,
        threads: int | None = None, seed: int = 0, relax: bool = False,
        start: np.ndarray | None = None, progress: Callable[[dict], None] | None = None,
        verbose: bool = False, stop_at: float | None = None,
        bound_at: float | None = None, settle: float | None = None,
        jump: bool = True, reduced_cost: bool = True,
        solutions: Callable[[np.ndarray], None] | None = None) -> BackendResult:
    """Solve the model in ``arrays`` (see ``MilpModel.arrays``); ``relax`` drops integrality.
    ``stop_at``: stop as soon as a solution this good is found (the caller holds a bound that
    already proves it optimal); ``bound_at``: stop as soon as the proven bound is this high
    (the caller holds a solution of that cost); the result's status is then "stopped".
    ``settle`` (with a finite ``bound_at``, integer programs only): stop as soon as the
    incumbent is within ``settle`` times the distance from the proven bound to ``bound_at``,
    and the gap is still open (the model's optimum, at most the incumbent, is then below
    ``bound_at``, and the bound can rise by at most that share of the distance left); the
    status is then "settled".
    ``jump`` False: no feasibility-jump heuristic, for a caller that wants only the bound, or
    whose model has an obvious solution (``bounds.retained``: keeping nothing); never
    with less than ``JUMP_SECONDS_PER_NONZERO`` a nonzero (time limit / nonzeros). It
    runs before the root LP and past the time limit: the moment model of heterogeneous
    linear(384), 589057 columns, with a 1 s limit returned after 17.1 s with it and 7.8 s
    without; that of linear(384, unit) at its least peak was solved to optimality in 21.2 s
    with it and 15.8 s without (bench/results/fast_notes.md, session 19).
    ``reduced_cost`` False: no root reduced-cost heuristic (``ROOT_HEURISTIC``), for a caller
    that wants the bound within its time limit more than solutions.
    ``solutions`` (integer programs): called with each improving solution vector HiGHS finds,
    in order (the last is ``x`` unless the solve ends without one), from HiGHS's thread, so
    it must not raise: a caller that starts searches from them (``bounds.retention_bound``).

    Integer programs run without HiGHS's presolve. Its MIP presolve has a record of "optimal"
    answers that are not (HiGHS issues #1273, #1725, #3094), and HiGHS 1.16 with presolve and
    a start returned wrong answers here. On ``linear(4, unit=True)`` at 80% it reported objective
    12 with the start's own vector (cost 14); on the tiny VGG16 graph at 60%
    (bench/graphs/vgg16-module.json) it claimed "optimal" at 14.152 with bound 14.152 while the
    optimum is 14.1485 (proven by cold solves with and without presolve, and by a start without
    presolve, which was also the fastest of the four: 7 s against 20-28 s)."""
    jump = jump and (time_limit is None or
                     time_limit >= JUMP_SECONDS_PER_NONZERO * arrays["matrix"].nnz)
    result = _solve(arrays, time_limit, mip_rel_gap, threads, seed, relax, start, progress,
                    verbose, stop_at, bound_at, settle, presolve=relax, jump=jump,
                    reduced_cost=reduced_cost, solutions=solutions)
    if result.x is not None and not relax and _stale(arrays, result):
        raise RuntimeError("HiGHS returned a solution vector whose objective is not the one it "
                           "reports; please report this model")
    return result


def _stale(arrays: dict, result: "BackendResult") -> bool:
    """True when the returned vector's objective is not the objective HiGHS reports."""
    actual = float(np.dot(arrays["cost"], result.x))
    return abs(actual - result.objective) > 1e-6 * max(1.0, abs(result.objective))


def _solve(arrays: dict, time_limit, mip_rel_gap, threads, seed, relax, start, progress,
           verbose, stop_at, bound_at, settle, presolve: bool, jump: bool,
           reduced_cost: bool, solutions=None) -> BackendResult:
    highspy = _highspy()
    h = _new_highs(highspy, verbose)
    h.passModel(_lp(highspy, arrays, relax))
    _set_options(h, time_limit, mip_rel_gap, threads, seed)
    if not presolve:
        h.setOptionValue("presolve", "off")
    if not jump:
        h.setOptionValue("mip_heuristic_run_feasibility_jump", False)
    if not reduced_cost:
        h.setOptionValue(ROOT_HEURISTIC, False)
    if start is not None and not relax:
        solution = highspy.HighsSolution()
        solution.col_value = list(map(float, start))
        solution.value_valid = True
        h.setSolution(solution)
    if progress is not None and not relax:
        _watch(h, progress)
    if solutions is not None and not relax:
        h.cbMipImprovingSolution.subscribe(
            lambda event: solutions(np.array(event.data_out.mip_solution, dtype=float)))
    reached: list[str | None] = [None]
    if stop_at is not None and not relax:  # an incumbent this good
        _cancel_when(h, reached, h.cbMipImprovingSolution,
                     lambda out: "stopped" if float(out.objective_function_value) <= stop_at
                     else None)
    if bound_at is not None and not relax:  # a proven bound this high
        _cancel_when(h, reached, h.cbMipInterrupt,
                     lambda out: _bound_reached(out, bound_at, settle))
    began = time.perf_counter()
    interrupted = _run_interruptible(h)
    result = _result(highspy, h, relax, interrupted, time.perf_counter() - began)
    if reached[0] and result.status == "interrupted" and not interrupted:
        result.status = reached[0]
    return result


def _bound_reached(out, bound_at: float, settle: float | None) -> str | None:
    """"stopped" once the proven bound is ``bound_at``, "settled" once the incumbent is within
    ``settle`` of the distance left to it and the gap is open (``run``), else None."""
    dual, primal = float(out.mip_dual_bound), float(out.mip_primal_bound)
    if dual >= bound_at:
        return "stopped"
    if settle is None or not np.isfinite([dual, primal, bound_at]).all():
        return None
    closed = primal - dual <= CLOSED_GAP * max(1.0, abs(primal))  # HiGHS ends it as optimal
    return "settled" if not closed and primal - dual <= settle * (bound_at - dual) else None


def _cancel_when(h, reached: list[str | None], callback, done: Callable) -> None:
    """Cancel the solve the first time ``done(event.data_out)`` returns a reason for an event
    of ``callback``; ``reached[0]`` then holds it."""

    def check(event) -> None:
        if reached[0] is None:
            reached[0] = done(event.data_out)
            if reached[0] is not None:
                h.cancelSolve()

    callback.subscribe(check)


def _lp(highspy, arrays: dict, relax: bool):
    matrix = arrays["matrix"]
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = matrix.shape[1], matrix.shape[0]
    lp.col_cost_ = arrays["cost"]
    lp.col_lower_, lp.col_upper_ = arrays["col_lower"], arrays["col_upper"]
    lp.row_lower_, lp.row_upper_ = arrays["row_lower"], arrays["row_upper"]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    if not relax:
        kinds = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                 for i in arrays["integrality"]]
        lp.integrality_ = kinds
    return lp


def _set_options(h, time_limit, mip_rel_gap, threads, seed) -> None:
    if time_limit is not None:
        h.setOptionValue("time_limit", max(float(time_limit), 0.01))
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("random_seed", int(seed))
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    if threads is not None:
        h.setOptionValue("threads", int(threads))


def _watch(h, progress: Callable[[dict], None]) -> None:
    """Report incumbent, bound and gap whenever HiGHS improves either."""
    last = {"incumbent": None, "bound": None}

    def report(event) -> None:
        out = event.data_out
        incumbent, bound = float(out.mip_primal_bound), float(out.mip_dual_bound)
        if (incumbent, bound) == (last["incumbent"], last["bound"]):
            return
        last.update(incumbent=incumbent, bound=bound)
        progress({"incumbent": incumbent, "bound": bound, "gap": float(out.mip_gap),
                  "time": float(out.running_time)})

    h.cbMipImprovingSolution.subscribe(report)
    h.cbMipLogging.subscribe(report)


def _run_interruptible(h) -> bool:
    """Run HiGHS in its worker thread; Ctrl-C (or a stop ``interrupt.requested`` before it)
    cancels it and we wait (``interrupt.run_cancellable``, whose temporary SIGINT handler sets
    a flag instead of raising, so the interrupt can never escape between polls and leave the
    solver thread running). True if interrupted."""
    h.HandleUserInterrupt = True
    return run_cancellable(lambda: h.startSolve().join(), h.cancelSolve)[1]


def _result(highspy, h, relax: bool, interrupted: bool, seconds: float) -> BackendResult:
    status = h.getModelStatus()
    kinds = highspy.HighsModelStatus
    info = h.getInfo()
    solution = h.getSolution()
    has_x = solution.value_valid and (relax or info.primal_solution_status == 2)
    x = np.array(solution.col_value) if has_x else None
    objective = float(info.objective_function_value) if has_x else float("inf")
    bound = objective if relax else float(info.mip_dual_bound)
    if status == kinds.kOptimal:
        name = "optimal"
    elif status == kinds.kInfeasible:
        name = "infeasible"
    elif interrupted or status in (kinds.kInterrupt, kinds.kHighsInterrupt):
        name = "interrupted"
    elif status in (kinds.kTimeLimit, kinds.kIterationLimit, kinds.kSolutionLimit):
        name = "timeout"
    else:
        name = "error"
    if relax and name != "optimal":
        bound = float("-inf")
    return BackendResult(name, x, objective, bound, seconds)
