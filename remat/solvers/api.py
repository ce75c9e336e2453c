"""``remat.solve``: the user-facing entry point over the registry."""
from __future__ import annotations

import math
from dataclasses import replace

from remat.errors import InfeasibleBudgetError, InvalidScheduleError
from remat.graph.core import RematGraph
from remat.schedule.budget import parse_budget
from remat.schedule.solution import Solution
from remat.solvers.base import SolveOptions, method_names, solver

METHODS: tuple[str, ...] = method_names()


def solve(graph: RematGraph, budget, method: str = "auto", time_limit: float | None = None,
          **options) -> Solution:
    """The schedule of ``method`` that minimises compute within ``budget``.

    ``budget`` is bytes, a size string (``"1.5GiB"``) or a percentage (``"60%"``) of the
    checkpoint-all peak above static memory. Raises ``InfeasibleBudgetError`` (with
    ``.min_budget``) when the method finds no schedule that fits, KeyboardInterrupt where
    Ctrl-C stopped it before it found one (after one, its best schedule, "timeout").
    """
    if not isinstance(graph, RematGraph):
        raise TypeError(f"solve() needs a RematGraph, got {type(graph).__name__}")
    solve_fn = solver(method)
    budget_bytes = parse_budget(budget, graph)
    opts = _priced_initial(graph, SolveOptions.from_kwargs(time_limit=time_limit, **options))
    result = solve_fn(graph, budget_bytes, opts)
    if not result.feasible and result.details.get("interrupted") and \
            not result.proven_infeasible:
        raise KeyboardInterrupt  # Ctrl-C before any schedule: nothing to return
    if not result.feasible:
        raise InfeasibleBudgetError(_infeasible_message(method, budget, budget_bytes, result),
                                    min_budget=result.min_budget, budget=budget_bytes)
    return result


def _priced_initial(graph: RematGraph, options: SolveOptions) -> SolveOptions:
    """``options`` with ``initial`` priced again on ``graph`` by the simulator: its cost and
    peak are the ones the methods compare and check against the budget, and a schedule of
    another graph must not pass for one of this one. Its status and lower bound are not kept
    (milp counts an initial's lower bound as proven): "feasible", and the bound every
    schedule has. Raises where it is not a schedule of ``graph`` (``InvalidScheduleError``
    names the shape or the rule it breaks)."""
    initial = options.initial
    if initial is None:
        return options
    if not isinstance(initial, Solution):
        raise TypeError(f"initial must be a Solution, got {type(initial).__name__}")
    if initial.R is None or initial.S is None:
        raise ValueError("initial has no schedule (R and S are None: a result that found none)")
    try:
        priced = Solution.from_schedule(graph, initial.R, initial.S, initial.method,
                                        "feasible", initial.budget)
    except InvalidScheduleError as err:
        raise InvalidScheduleError(f"initial is not a schedule of this graph: {err}") from err
    return replace(options, initial=priced)


def _infeasible_message(method: str, budget, budget_bytes: float, result: Solution) -> str:
    need = "" if result.min_budget is None else \
        f"; the smallest budget it can meet is {format_bytes(result.min_budget)}"
    hint = "Raise the budget." if method in ("milp", "auto") else \
        "Raise the budget or try method='milp'."
    shown = format_bytes(budget_bytes)
    if result.details.get("floor") is not None:
        floor = format_bytes(result.details["floor"])
        if floor == shown:  # so close that two decimals read the same: say the bytes, both
            floor, shown = (f"{math.floor(b)} B" for b in (result.details["floor"], budget_bytes))
        hint = f"No schedule of this graph peaks below {floor} (proven). Raise the budget."
    elif result.proven_infeasible:
        hint = "No schedule fits this budget (proven). Raise the budget."
    elif result.details.get("reason"):
        hint = f"({result.details['reason']}: infeasibility is not proven; raise time_limit " \
               "or the budget.)"
    return f"method {method!r} finds no schedule within budget {budget!r} ({shown}){need}. {hint}"


def format_bytes(value: float) -> str:
    """``1.50 GiB`` style, for messages and tables."""
    value = float(value)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"
