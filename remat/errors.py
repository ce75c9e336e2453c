"""The exceptions remat raises. Every message names the node, value or op and the remedy."""


class RematError(Exception):
    """Base class of every error remat raises on purpose."""


class InvalidGraphError(RematError, ValueError):
    """A graph is malformed: cyclic or unsorted dependencies, bad costs, duplicate names."""


class InvalidScheduleError(RematError, ValueError):
    """An R/S schedule or a plan breaks a dependency or the schedule invariants."""


class InfeasibleBudgetError(RematError):
    """No schedule of the chosen method fits the budget.

    ``min_budget`` is the smallest budget (bytes, static memory included) the method can meet.
    """

    def __init__(self, message: str, min_budget: float | None = None, budget: float | None = None):
        super().__init__(message)
        self.min_budget = min_budget
        self.budget = budget


class UnsupportedModelError(RematError):
    """A model cannot be captured: data-dependent control flow or an op remat cannot handle."""


class UnsupportedGraphError(RematError, ValueError):
    """A method does not apply to this graph's shape (e.g. ``griewank`` on a non-chain)."""
