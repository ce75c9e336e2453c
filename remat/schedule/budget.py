"""The one budget parser. A budget is total bytes, static memory included."""
from __future__ import annotations

import math
import re
import weakref

from remat.errors import RematError
from remat.graph.core import RematGraph

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z%]*)\s*$")


class BudgetError(RematError, ValueError):
    """A budget that cannot be parsed or makes no sense."""


_PEAKS: "weakref.WeakKeyDictionary[RematGraph, float]" = weakref.WeakKeyDictionary()


def checkpoint_all_peak(graph: RematGraph) -> float:
    """Peak bytes of the plain step (nothing recomputed), static memory included.

    Graphs are frozen, so the simulation runs once per graph: every percentage budget of a
    sweep reads it again."""
    if graph not in _PEAKS:
        from remat.schedule.rs import checkpoint_all
        from remat.schedule.simulate import simulate

        _PEAKS[graph] = simulate(graph, *checkpoint_all(graph)).peak_memory
    return _PEAKS[graph]


def parse_budget(budget, graph: RematGraph | None = None) -> float:
    """Bytes for an int/float, a unit string (``"1.5GiB"``, ``"800MB"``) or ``"60%"``.

    A percentage p means ``static_mem + p * (checkpoint-all peak - static_mem)`` and needs the
    graph.
    """
    if isinstance(budget, bool) or budget is None:
        raise BudgetError(f"budget must be bytes, a size like '1.5GiB' or a percentage like "
                          f"'60%', got {budget!r}")
    if isinstance(budget, (int, float)) or hasattr(budget, "__index__"):
        return _positive(float(budget), budget)
    if not isinstance(budget, str):
        raise BudgetError(f"budget must be a number or a string, got {type(budget).__name__}")
    match = _PATTERN.match(budget)
    if not match:
        raise BudgetError(f"cannot read budget {budget!r}: write bytes (1000000), a size with a "
                          f"unit ('1.5GiB', '800MB') or a percentage ('60%')")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        return _percentage(value, budget, graph)
    if unit not in _UNITS and unit != "":
        raise BudgetError(f"unknown unit {match.group(2)!r} in budget {budget!r}; use one of "
                          "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or %")
    return _positive(value * _UNITS.get(unit, 1), budget)


def parse_percentage(text: str) -> float:
    """The fraction of a percentage budget (``"60%"`` -> 0.6); anything else is a BudgetError.
    Sweeps use it to take budgets relative to each graph."""
    match = _PATTERN.match(text) if isinstance(text, str) else None
    if not match or match.group(2) != "%":
        raise BudgetError(f"expected a percentage like '60%', got {text!r}")
    value = float(match.group(1))
    if value <= 0:
        raise BudgetError(f"budget {text!r} must be above 0%")
    return value / 100.0


def budget_percent(budget: float, graph: RematGraph) -> float:
    """The percentage p whose budget ``"p%"`` is ``budget`` bytes: where it sits between static
    memory (0%) and checkpoint-all's peak (100%)."""
    static = graph.static_mem
    return 100.0 * (float(budget) - static) / (checkpoint_all_peak(graph) - static)


def _percentage(value: float, text: str, graph: RematGraph | None) -> float:
    if value <= 0:
        raise BudgetError(f"budget {text!r} must be above 0%")
    if graph is None:
        raise BudgetError(f"budget {text!r} is a percentage of the checkpoint-all peak, so it "
                          "needs the graph; give a byte count instead")
    static = graph.static_mem
    return static + value / 100.0 * (checkpoint_all_peak(graph) - static)


def _positive(value: float, original) -> float:
    if not math.isfinite(value) or value <= 0:
        raise BudgetError(f"budget must be a positive, finite number of bytes, got {original!r}")
    return value
