"""Cost models: how much compute each remat node of a captured step takes.

``"profile"``: seconds, timed on the model's device (warm-up, then the median of several
runs; CUDA events on GPU). ``"flops"``: ``torch.utils.flop_counter`` formulas (matmul,
convolution, attention), one flop per output element for every other op. ``"unit"``: 1 per
node. A callable ``cost_model(capture) -> sequence of T numbers`` is accepted too.
This module imports torch only inside the torch cost models.
"""
from __future__ import annotations

COST_MODELS = ("profile", "flops", "unit")


def node_costs(cap, cost_model="profile") -> list[float]:
    """One cost per remat node of ``cap`` (a Capture)."""
    if callable(cost_model):
        costs = [float(c) for c in cost_model(cap)]
        if len(costs) != cap.graph.size:
            raise ValueError(f"cost_model returned {len(costs)} costs for {cap.graph.size} nodes")
        return costs
    if cost_model == "unit":
        return [1.0] * cap.graph.size
    if cost_model == "flops":
        from remat.costs.flops import flop_costs

        return flop_costs(cap)
    if cost_model == "profile":
        from remat.costs.profile import profile_costs

        return profile_costs(cap)
    raise ValueError(f"unknown cost_model {cost_model!r}; use one of {', '.join(COST_MODELS)} "
                     "or a callable(capture) -> costs")


def per_group(cap, op_costs: dict[str, float]) -> list[float]:
    """Sum per-fx-node costs over each remat node's group."""
    return [float(sum(op_costs.get(name, 0.0) for name in group)) for group in cap.node_groups]


__all__ = ["COST_MODELS", "node_costs", "per_group"]
