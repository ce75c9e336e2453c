"""``"flops"`` cost model: FLOP formulas of torch.utils.flop_counter, from shapes alone."""
from __future__ import annotations

import operator

import torch
from torch import fx
from torch.utils.flop_counter import flop_registry

from remat.costs import per_group


def node_flops(node: fx.Node) -> float:
    """FLOPs of one joint op: torch's formula if it has one, else one per output element."""
    target = node.target
    if target is operator.getitem or not isinstance(target, torch._ops.OpOverload):
        return 0.0
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    out = node.meta.get("val")
    formula = flop_registry.get(target.overloadpacket)
    if formula is not None:
        return float(formula(*args, **kwargs, out_val=out))
    return float(sum(t.numel() for t in _tensors(out)))


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def flop_costs(cap) -> list[float]:
    """One FLOP count per remat node; view ops count zero (they allocate and compute nothing)."""
    views = {name for name, storage in cap.storages.storage.items() if storage != name}
    costs = {n.name: node_flops(n) for n in cap.joint.graph.nodes
             if n.op == "call_function" and n.name not in views}
    return per_group(cap, costs)
