"""``capture()``: one training step of a PyTorch model as a RematGraph plus its joint graph."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from remat.capture.grouping import Group, check_ops, group_nodes, reorder_joint
from remat.capture.internal import internal_peaks
from remat.capture.specs import InputSignature, InputSpec, OutputSpec, input_spec, output_spec
from remat.capture.storage import StorageMap, build_storage_map, split_static_views
from remat.capture.trace import trace_joint
from remat.errors import UnsupportedModelError
from remat.graph.core import RematGraph
from remat.graph.order import ORDERS, lower_order, reordered


@dataclass(frozen=True, eq=False)
class Capture:
    """A captured training step: the remat graph and everything the runtime needs to run it.

    ``joint``: the functional aten forward+backward graph of one step, flat positional
    placeholders (described by ``placeholders``) and a flat tuple of outputs (``outputs``),
    laid out node after node: ``node_groups[i]`` are the fx names of remat node i, and
    concatenated they are the joint's ops in order. ``value_nodes[i]``: the fx nodes of group
    i read by other groups or returned; ``graph.mem[i]`` is the bytes of their distinct
    non-static storages; ``graph.workspace[i]`` is the bytes node i holds only while it runs:
    its internal temporaries and the fresh parameter gradients it writes, at their joint peak
    (see ``_node_meta``, ``gradient_storages``, ``remat.capture.internal``). ``random_nodes``:
    nodes holding a random op (dropout), each starting with it. ``storages`` maps each joint
    value to its storage and bytes (views share their base's). The field names are a contract
    with the runtime; add, never rename.
    """

    graph: RematGraph
    joint: fx.GraphModule
    node_groups: tuple[tuple[str, ...], ...]
    value_nodes: tuple[tuple[str, ...], ...]
    placeholders: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    random_nodes: frozenset[int]
    model: nn.Module
    example_inputs: tuple
    storages: StorageMap | None = None
    capture_time: float = 0.0

    def joint_args(self, *inputs) -> list:
        """The joint's placeholder values for these user inputs (the model's current tensors)."""
        flat_inputs = pytree.tree_leaves(inputs)
        params = dict(self.model.named_parameters(remove_duplicate=False))
        buffers = dict(self.model.named_buffers(remove_duplicate=False))
        args = []
        for spec, node in zip(self.placeholders, _placeholder_nodes(self.joint)):
            if spec.kind == "param":
                args.append(params[spec.target])
            elif spec.kind == "buffer":
                args.append(buffers[spec.target])
            elif spec.kind == "input":
                args.append(flat_inputs[spec.target])
            else:  # the loss's gradient seed
                val = node.meta["val"]
                args.append(torch.ones(val.shape, dtype=val.dtype, device=_device(self.model)))
        return args

    def run(self, *inputs) -> torch.Tensor:
        """Run the captured step as traced (nothing recomputed) and apply its effects like
        ``loss.backward()`` would: gradients accumulate into ``p.grad``, buffers update."""
        check_inputs(self, inputs)
        with torch.no_grad():
            outputs = self.joint(*self.joint_args(*inputs))
            return apply_outputs(self, outputs)


def apply_outputs(cap: Capture, outputs) -> torch.Tensor:
    """Accumulate gradients, copy buffer updates, return the loss (detached)."""
    params = dict(cap.model.named_parameters(remove_duplicate=False))
    buffers = dict(cap.model.named_buffers(remove_duplicate=False))
    loss = None
    for spec, value in zip(cap.outputs, outputs):
        if spec.kind == "loss":
            loss = value
        elif spec.kind == "grad" and value is not None:
            param = params[spec.target]
            if param.grad is None:
                param.grad = value.detach()
            else:
                param.grad.add_(value)
        elif spec.kind == "buffer_update":
            buffers[spec.target].copy_(value)
    return loss


def check_inputs(cap: Capture, inputs) -> None:
    """Inputs must have the example's structure, shapes, dtypes, devices and ``requires_grad``
    (one static graph)."""
    InputSignature.of(cap.example_inputs).check(
        inputs, UnsupportedModelError, "captured", "capture again (remat.capture) for them")


def capture(model: nn.Module, example_inputs, loss_fn=None, cost_model="profile",
            granularity: str = "module", order: str = "memory") -> Capture:
    """Trace one training step of ``model`` on ``example_inputs`` into a remat graph.

    ``loss_fn(model, *inputs) -> scalar``; without it ``model(*inputs)`` must return the loss.
    ``cost_model``: ``"profile"`` (time each node on the model's device), ``"flops"`` or
    ``"unit"``. ``granularity``: ``"module"`` (one node per module call) or ``"op"``.
    ``order``: one of ``ORDERS``; schedules run nodes in graph order, so the order bounds the
    peak any schedule reaches (tiny fcn_resnet50 at op level: checkpoint-all 45.7 -> 40.2 MB,
    the least peak found 40.5% -> 27.1% of the traced range; bench/results/order.csv).
    The model's parameters, buffers and the RNG state are left as they were.
    """
    _check_options(model, cost_model, granularity, order)
    start = time.perf_counter()
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    joint, in_descs, out_descs = trace_joint(model, inputs, loss_fn)
    check_ops(joint)
    split_static_views(joint)
    placeholders = tuple(input_spec(d) for d in in_descs)
    outputs = tuple(output_spec(d) for d in out_descs)
    storages = build_storage_map(joint)
    static = static_storages(joint, storages)
    groups = group_nodes(joint, storages, static, granularity)
    cap = _assemble(model, inputs, joint, groups, storages, static, placeholders, outputs)
    better = lower_order(cap.graph) if order == "memory" else None
    if better is not None:
        groups = [groups[v] for v in better]
        cap = _permuted(cap, better)
    reorder_joint(joint, groups)  # once, in the final order
    from remat.costs import node_costs

    costs = node_costs(cap, cost_model)
    graph = _with_costs(cap.graph, costs, cost_model)
    return _replace(cap, graph=graph, capture_time=time.perf_counter() - start)


def _permuted(cap: Capture, order: tuple[int, ...]) -> Capture:
    """``cap`` with its nodes in ``order`` (its joint already laid out that way)."""
    position = {v: i for i, v in enumerate(order)}
    return _replace(cap, graph=reordered(cap.graph, order),
                    node_groups=tuple(cap.node_groups[v] for v in order),
                    value_nodes=tuple(cap.value_nodes[v] for v in order),
                    random_nodes=frozenset(position[v] for v in cap.random_nodes))


def _check_options(model, cost_model, granularity, order) -> None:
    """Fail before tracing (which takes a while) on options that cannot work."""
    from remat.capture.grouping import GRANULARITIES
    from remat.costs import COST_MODELS

    if not isinstance(model, nn.Module):
        raise TypeError(f"capture needs a torch.nn.Module, got {type(model).__name__}")
    if not callable(cost_model) and cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost_model {cost_model!r}; use one of "
                         f"{', '.join(COST_MODELS)} or a callable(capture) -> costs")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def _assemble(model, inputs, joint, groups: list[Group], storages, static, placeholders,
              outputs) -> Capture:
    """Build the RematGraph (unit costs for now) and the Capture around it."""
    group_of = {name: i for i, g in enumerate(groups) for name in g.nodes}
    nodes = {n.name: n for n in joint.graph.nodes}
    deps, values = [], []
    for i, group in enumerate(groups):
        deps.append(sorted({group_of[a.name] for name in group.nodes
                            for a in nodes[name].all_input_nodes
                            if a.name in group_of and group_of[a.name] != i}))
        values.append(tuple(name for name in group.nodes
                            if _read_outside(nodes[name], group_of, i)))
    mem = [storages.bytes_of([n for n in v if storages.storage.get(n) not in static])
           for v in values]
    fresh = gradient_storages(joint, storages, outputs)
    meta = [_node_meta(g, v, nodes, storages, static, fresh) for g, v in zip(groups, values)]
    graph = RematGraph([g.name for g in groups], [1.0] * len(groups), mem, deps,
                       [g.backward for g in groups],
                       static_mem=sum(storages.nbytes[s] for s in static), node_meta=meta,
                       meta={"cost_unit": "unit", "mem_unit": "bytes",
                             "workspace": "peak of internal temporaries and fresh parameter "
                                          "gradients alive together (node workspace_bytes)"},
                       workspace=[m["workspace_bytes"] for m in meta])
    return Capture(graph=graph, joint=joint, node_groups=tuple(g.nodes for g in groups),
                   value_nodes=tuple(values), placeholders=placeholders, outputs=outputs,
                   random_nodes=frozenset(i for i, g in enumerate(groups) if g.random),
                   model=model, example_inputs=inputs, storages=storages)


def _node_meta(group: Group, values, nodes, storages: StorageMap, static, fresh) -> dict:
    """What the graph file shows of a node, with the parts of its transient workspace:
    ``grad_bytes`` (its fresh parameter gradients), ``internal_bytes`` (the peak of its
    internal temporaries, see ``remat.capture.internal``) and ``workspace_bytes``, the peak
    of both alive at the same op, which is ``graph.workspace``. Internals and a gradient
    are summed only where they overlap (at and after the op making the gradient, until its
    last read), so the workspace lies between the larger part and their sum."""
    ops = [_op_name(nodes[n]) for n in group.nodes if _op_name(nodes[n]) != "getitem"]
    outputs = {storages.storage[n] for n in values if n in storages.storage} - set(static)
    internal, both = internal_peaks([nodes[n] for n in group.nodes], storages,
                                    outputs | set(static), fresh, outputs)
    grad = storages.bytes_of([n for n in values if storages.storage.get(n) in fresh])
    return {"module": group.module, "ops": ops, "random": group.random, "grad_bytes": grad,
            "internal_bytes": internal, "workspace_bytes": max(both, grad)}


def static_storages(joint: fx.GraphModule, storages: StorageMap) -> set[str]:
    """Storages alive for the whole step: placeholders (parameters, buffers, inputs, tangent)
    and the step's outputs (loss, gradients, new buffer values)."""
    static = set()
    for node in joint.graph.nodes:
        if node.op == "placeholder" and node.name in storages.storage:
            static.add(storages.storage[node.name])
        elif node.op == "output":
            static.update(storages.storage[a.name] for a in node.all_input_nodes
                          if a.name in storages.storage)
    return static


def gradient_storages(joint: fx.GraphModule, storages: StorageMap, outputs) -> set[str]:
    """Storages of the gradients the step returns, other than its inputs' own storages.

    ``static_mem`` holds each gradient once, as ``p.grad``. But when ``p.grad`` already exists
    (every step after the first, unless zeroed with ``set_to_none=True``), the op makes the new
    gradient in a fresh tensor that lives next to ``p.grad`` until the runtime adds it in,
    right after the op. So each node's fresh gradient bytes (node meta ``grad_bytes``) are part
    of its transient ``workspace``: counted in that node's candidate only, never for the whole
    step. When ``p.grad`` is None the fresh tensor becomes ``p.grad`` and that part goes unused,
    so the first step's prediction is high by at most one node's gradients.
    """
    inputs = {storages.storage[n.name] for n in joint.graph.nodes
              if n.op == "placeholder" and n.name in storages.storage}
    output = next(n for n in joint.graph.nodes if n.op == "output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    fresh = {storages.storage[v.name] for spec, v in zip(outputs, values)
             if spec.kind in ("grad", "input_grad") and isinstance(v, fx.Node)
             and v.name in storages.storage}
    return fresh - inputs


def _read_outside(node: fx.Node, group_of: dict[str, int], group: int) -> bool:
    return any(user.op == "output" or group_of.get(user.name, group) != group for user in node.users)


def _op_name(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target).removeprefix("aten.")
    return getattr(target, "__name__", str(target))


def _with_costs(graph: RematGraph, costs, cost_model) -> RematGraph:
    unit = {"profile": "seconds", "flops": "flops", "unit": "unit"}.get(cost_model, str(cost_model))
    return RematGraph(graph.names, costs, graph.mem, graph.deps, graph.is_backward,
                      static_mem=graph.static_mem, node_meta=graph.node_meta,
                      meta={**graph.meta, "cost_unit": unit, "cost_model": str(cost_model)},
                      workspace=graph.workspace)


def _replace(cap: Capture, **changes) -> Capture:
    from dataclasses import replace

    return replace(cap, **changes)


def _placeholder_nodes(joint: fx.GraphModule) -> list[fx.Node]:
    return [n for n in joint.graph.nodes if n.op == "placeholder"]


def _device(model: nn.Module) -> torch.device:
    for tensor in list(model.parameters()) + list(model.buffers()):
        return tensor.device
    return torch.device("cpu")
