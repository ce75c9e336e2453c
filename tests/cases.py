"""The shared case table: every solver is run over these graphs and budgets.

Budgets are percentages of the checkpoint-all peak above static memory (DESIGN.md), from the
very tight to the unconstrained.
"""
from __future__ import annotations

import remat

BUDGETS = ("20%", "40%", "60%", "80%", "100%")

GRAPHS = {
    "chain4-unit": lambda: remat.graphs.linear(4, unit=True),
    "chain8-unit": lambda: remat.graphs.linear(8, unit=True),
    "chain8": lambda: remat.graphs.linear(8),
    "chain16-unit": lambda: remat.graphs.linear(16, unit=True),
    "unet2-unit": lambda: remat.graphs.unet(2, unit=True),
    "unet3": lambda: remat.graphs.unet(3),
    "dag10-s1": lambda: remat.graphs.random_dag(10, seed=1),
    "dag12-s2-unit": lambda: remat.graphs.random_dag(12, seed=2, unit=True),
    "dag20-s3": lambda: remat.graphs.random_dag(20, seed=3),
}

CASES = [(name, budget) for name in GRAPHS for budget in BUDGETS]


def graph(name: str) -> remat.RematGraph:
    return GRAPHS[name]()
