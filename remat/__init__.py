"""remat: optimal tensor rematerialization for PyTorch training steps (Checkmate, done right).

The torch-free core (graph, schedule, solvers) imports with numpy alone; ``capture``,
``compile`` and ``measure_peak`` import torch when first used.
"""
from remat import graph as graphs
from remat.errors import (InfeasibleBudgetError, InvalidGraphError, InvalidScheduleError,
                          RematError, UnsupportedModelError)
from remat.graph import RematGraph
from remat.schedule import Simulation, Solution, parse_budget, simulate
from remat.solvers import METHODS, SolveOptions, solve

__version__ = "0.1.0"

_TORCH_API = {
    "capture": "remat.capture",
    "compile": "remat.runtime",
    "measure_peak": "remat.runtime.memory",
    "zoo": "remat.zoo",
}


def __getattr__(name: str):
    if name in _TORCH_API:
        import importlib

        module = importlib.import_module(_TORCH_API[name])
        return module if name == "zoo" else getattr(module, name)
    raise AttributeError(f"module 'remat' has no attribute {name!r}")


__all__ = ["METHODS", "InfeasibleBudgetError", "InvalidGraphError", "InvalidScheduleError",
           "RematError", "RematGraph", "Simulation", "SolveOptions", "Solution",
           "UnsupportedModelError", "graphs", "parse_budget", "simulate", "solve",
           "capture", "compile", "measure_peak", "zoo"]
