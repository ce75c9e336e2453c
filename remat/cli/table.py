"""Plain-text tables for the command line."""
from __future__ import annotations

from remat.schedule.solution import Solution
from remat.solvers.api import format_bytes

HEADER = ("method", "status", "peak", "budget", "overhead", "bound", "gap", "time")


def solution_row(sol: Solution) -> tuple[str, ...]:
    if not sol.feasible:
        need = "" if sol.min_budget is None else f"needs {format_bytes(sol.min_budget)}"
        status = "infeasible" if sol.proven_infeasible else "no schedule"
        return (sol.method, status, need, format_bytes(sol.budget), "-", "-", "-",
                f"{sol.solve_time:.2f}s")
    gap = sol.gap
    bound = sol.lower_bound / sol.compute_cost * sol.overhead if sol.compute_cost else 1.0
    return (sol.method, sol.status, format_bytes(sol.peak_memory), format_bytes(sol.budget),
            f"{sol.overhead:.3f}x", f"{bound:.3f}x", "-" if gap is None else f"{gap:.1%}",
            f"{sol.solve_time:.2f}s")


def render(rows: list[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> str:
    table = [header] + rows
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
