"""Solvers: one module per method, found through one registry (``solvers.base``)."""
from remat.solvers.api import METHODS, solve
from remat.solvers.base import SolveOptions, method_names, solver

__all__ = ["METHODS", "SolveOptions", "method_names", "solve", "solver"]
