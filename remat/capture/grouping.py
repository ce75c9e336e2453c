"""Group the joint graph's aten ops into remat nodes (Checkmate's layer-level graphs).

A *unit* is one aten op with the ``getitem``s that read its tuple output and the view/detach
ops aliasing its storage (a view joins the op that owns its storage, so that a node never
exposes an alias of another node's memory). ``granularity="op"``: one remat node per unit.

``granularity="module"`` (default): consecutive units of the same module call and phase are
fused while the fused values stay internal: a unit joins the next one when everything it
produces that others read (static storages aside) is read by that next unit only. So a
node's outputs share one lifetime, which is what the memory model assumes, and a module
call becomes one node or a few (conv | batchnorm, or attention's matmul+scale+mask+softmax).
Functional ops belong to the enclosing module (``F.relu`` in ``Net.forward`` is a node of
``Net``); backward ops are attributed to the module whose backward they are, and backward ops
without a module (gradient-accumulation adds) to the run before them. Random ops (dropout)
always form a node of their own, so that nothing else is pinned with them.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx

from remat.capture.storage import StorageMap
from remat.capture.trace import MODEL_ATTR
from remat.errors import UnsupportedModelError

GRANULARITIES = ("module", "op")
FUSE_WINDOW = 4  # a group may absorb up to this many following units
SMALL_VALUE = 32  # a value this many times smaller than its node's largest may outlive it


@dataclass(frozen=True)
class Group:
    """One remat node: its fx node names (joint order) and what the graph file shows."""

    nodes: tuple[str, ...]
    backward: bool
    module: str
    name: str
    random: bool


def group_nodes(gm: fx.GraphModule, storages: StorageMap, static: set[str],
                granularity: str = "module") -> list[Group]:
    """Remat nodes of the joint, forward ones first, each group's nodes in joint order.

    ``static``: storages alive the whole step (placeholders, outputs); reading them costs
    no memory, so they never prevent a fusion.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    position = {n.name: i for i, n in enumerate(ops)}
    units = _units(ops, storages)
    if granularity == "module":
        units = _fuse(units, storages, static)
    # a unit's first node is its op (its head): it decides the phase and the order
    heads = [(nodes[0], sorted(nodes, key=lambda n: position[n.name])) for nodes in units]
    heads.sort(key=lambda pair: (_is_backward(pair[0]), position[pair[0].name]))
    return _named(heads)


def _units(ops: list[fx.Node], storages: StorageMap) -> list[list[fx.Node]]:
    """One unit per op; getitems and aliases of an op-made storage join their owner's unit,
    views of a placeholder (one reader each, see ``split_static_views``) their reader's."""
    label: dict[str, int] = {}
    units: list[list[fx.Node]] = []
    static_views = []
    for node in ops:
        owner = storages.storage.get(node.name)
        if node.target is operator.getitem and node.args[0].name in label:
            label[node.name] = label[node.args[0].name]
        elif owner is not None and owner != node.name and owner in label:
            label[node.name] = label[owner]
        elif owner is not None and owner != node.name and len(node.users) == 1:
            static_views.append(node)
            continue
        else:
            label[node.name] = len(units)
            units.append([])
        units[label[node.name]].append(node)
    for node in reversed(static_views):  # a chain's reader is labelled before the chain
        reader = next(iter(node.users))
        label[node.name] = label[reader.name] if reader.name in label else len(units)
        if label[node.name] == len(units):
            units.append([])
        units[label[node.name]].append(node)
    return units


def _fuse(units: list[list[fx.Node]], storages: StorageMap, static: set[str]) -> list[list[fx.Node]]:
    """Grow each group over the next units of its run while its values stay internal.

    A group absorbs the units up to the last one reading its (significant) values, when all
    those readers lie within the next ``FUSE_WINDOW`` units of the same run (batchnorm's
    output read by both the clone and the clamp of a functionalised in-place ReLU6); a group
    whose values nobody reads (a buffer update) joins the next unit.
    """
    keys = _run_keys(units)
    unit_of = {n.name: k for k, unit in enumerate(units) for n in unit}
    fused: list[list[fx.Node]] = []
    start = 0
    while start < len(units):
        group, end = list(units[start]), start + 1
        while end < len(units):
            readers = _readers(group, unit_of, storages, static)
            last = max(readers, default=end)
            if min(readers, default=end) < end or last >= end + FUSE_WINDOW:
                break
            span = range(end, last + 1)
            if any(keys[k] != keys[start] or _has_random(units[k]) for k in span):
                break
            for k in span:
                group += units[k]
            end = last + 1
        fused.append(group)
        start = end
    return fused


def _run_keys(units: list[list[fx.Node]]) -> list[tuple]:
    """Which units may fuse: all forward units (a fused forward chain holds only transient
    values: conv+relu, batchnorm+relu); backward units of the same module (the gradient
    chain is all transients, so module calls bound it); a backward unit without module
    continues the run before it."""
    keys, previous = [], None
    for unit in units:
        head = unit[0]
        key = (True, module_path(head)) if _is_backward(head) else (False,)
        if key[0] and key[1] is None and previous is not None and previous[0]:
            key = previous
        keys.append(key)
        previous = key
    return keys


def _readers(group: list[fx.Node], unit_of: dict[str, int], storages: StorageMap,
             static: set[str]) -> set[int]:
    """Units outside ``group`` reading its significant values (``-1``: the step's outputs).

    Static storages cost nothing, and small values (a 32nd of the group's largest, such as
    batchnorm's mean and inverse std) may outlive the rest without distorting memory much.
    """
    inside = {n.name for n in group}
    sizes = {n.name: storages.nbytes.get(storages.storage.get(n.name), 0) for n in group}
    largest = max(sizes.values(), default=0)
    readers: set[int] = set()
    for node in group:
        if storages.storage.get(node.name) in static or sizes[node.name] * SMALL_VALUE <= largest:
            continue
        for user in node.users:
            if user.name not in inside:
                readers.add(unit_of.get(user.name, -1))
    return readers


def _has_random(nodes: list[fx.Node]) -> bool:
    return any(is_random(n) for n in nodes)


def _named(groups: list[tuple[fx.Node, list[fx.Node]]]) -> list[Group]:
    out, used = [], set()
    for head, nodes in groups:
        backward = _is_backward(head)
        real = [n for n in nodes if n.target is not operator.getitem] or nodes
        paths = [module_path(n) for n in real if module_path(n) is not None]
        module = "+".join(dict.fromkeys(p for p in paths if p)) or ""
        base = f"{'bwd' if backward else 'fwd'}:{module or real[0].name}"
        name, k = base, 2
        while name in used:
            name, k = f"{base}#{k}", k + 1
        used.add(name)
        out.append(Group(tuple(n.name for n in nodes), backward, module, name,
                         any(is_random(n) for n in nodes)))
    return out


def _is_backward(node: fx.Node) -> bool:
    return node.meta.get("partitioner_tag") == "is_backward"


def module_path(node: fx.Node) -> str | None:
    """FQN (in the user's model) of the innermost module whose call made this op, or None."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    if path == MODEL_ATTR or path.startswith(MODEL_ATTR + "."):
        path = path[len(MODEL_ATTR) + 1:]
    return path


def is_random(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and \
        torch.Tag.nondeterministic_seeded in target.tags


def check_ops(gm: fx.GraphModule) -> None:
    """Raise UnsupportedModelError naming any op the runtime could not replay."""
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "call_function", "output"):
            raise UnsupportedModelError(f"capture cannot handle fx node {node.name!r} of kind "
                                        f"{node.op!r} ({node.target}) in the joint graph")
        if node.op == "call_function" and not (isinstance(node.target, torch._ops.OpOverload)
                                               or node.target is operator.getitem):
            raise UnsupportedModelError(f"capture cannot handle op {node.target} (node "
                                        f"{node.name!r}): the joint graph must hold aten ops only")
