"""Group the joint graph's aten ops into remat nodes (Checkmate's layer-level graphs).

A *unit* is one aten op with the ``getitem``s reading its tuple output and the view/detach
ops aliasing its storage: a view joins the op that owns its storage (views of a parameter,
one copy per reader, join their reader), so a node never exposes an alias of another node's
memory. ``granularity="op"``: one remat node per unit.

``granularity="module"`` (default): the memory model gives each node ONE output with one
lifetime, so units are fused exactly where that holds: a group absorbs the units reading its
values while those values are read by nobody else (conv+ReLU, BatchNorm+ReLU, attention's
matmul+scale+mask+softmax, BatchNorm+residual add+ReLU), values an 8th of the group's
largest or less (BatchNorm's mean and inverse std) may outlive the rest, and units whose
values only the step's outputs read (buffer updates, weight gradients) ride along with the
next unit. Forward units fuse across modules (only transients are fused); backward units
fuse within the module whose backward they are (the gradient chain is all transients), and
backward ops without a module (gradient accumulation) join the run before them. Functional
ops belong to the enclosing module (``F.relu`` in ``Net.forward`` is ``Net``'s). A random op
(dropout) never joins an earlier group, so a random node starts with its random op.
Groups are named ``fwd:``/``bwd:`` + the module paths they cover.
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
SMALL_VALUE = 8  # a value this many times smaller than its node's largest may outlive it


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
    # a unit's first node is its op (its head): it decides the phase; units come in order
    heads = [(nodes[0], sorted(nodes, key=lambda n: position[n.name])) for nodes in units]
    heads.sort(key=lambda pair: _is_backward(pair[0]))  # stable: keeps the order within
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
    """Grow groups over units while the values passed between them stay internal.

    A group absorbs the readers of its (significant) values when all of them are free units
    of the same run within ``FUSE_WINDOW`` units of its last member (batchnorm -> relu; the
    clone and the clamp of a functionalised in-place ReLU6); a group whose values nobody
    reads (a buffer update) joins the next free unit of its run; and a unit whose values only
    one later group reads joins it (the downsample branch's batchnorm, read only by the
    residual add that the main branch's group absorbed). Units in between that do not read
    the group stay separate nodes, placed before it.
    """
    units = _attach_quiet_units(units, storages, static)
    fusion = _Fusion(units, storages, static)
    for start in range(len(units)):
        if not fusion.taken[start] and not fusion.join_reader(start):
            fusion.grow(start)
    groups = sorted(fusion.groups, key=max)  # a group runs where its last unit was
    return [[n for k in sorted(members) for n in units[k]] for members in groups]


class _Fusion:
    """Mutable state of one ``_fuse`` call: which unit went to which group."""

    def __init__(self, units, storages: StorageMap, static: set[str]):
        self.units, self.storages, self.static = units, storages, static
        self.keys = _run_keys(units)
        self.unit_of = {n.name: k for k, unit in enumerate(units) for n in unit}
        self.taken = [False] * len(units)
        self.groups: list[list[int]] = []
        self.group_of: dict[int, int] = {}

    def _add(self, group: int, unit: int) -> None:
        self.groups[group].append(unit)
        self.taken[unit] = True
        self.group_of[unit] = group

    def grow(self, start: int) -> None:
        group = len(self.groups)
        self.groups.append([])
        self._add(group, start)
        members = self.groups[group]
        while True:
            nodes = [n for k in members for n in self.units[k]]
            readers = _readers(nodes, self.unit_of, self.storages, self.static)
            if not _absorbable(readers, members, self.keys, self.units, self.taken):
                return
            grown = nodes + [n for k in readers for n in self.units[k]]
            if _read_in_between(grown, self.unit_of, set(members) | readers):
                return
            for k in sorted(readers):
                self._add(group, k)

    def join_reader(self, unit: int) -> bool:
        """Put ``unit`` into the one later group that reads its values, if it is safe."""
        nodes = self.units[unit]
        readers = _readers(nodes, self.unit_of, self.storages, self.static)
        groups = {self.group_of.get(k) for k in readers}
        if not readers or len(groups) != 1 or None in groups:
            return False
        group = groups.pop()
        members = self.groups[group]
        if self.keys[unit] != self.keys[members[0]] or _has_random(nodes) \
                or _has_random(self.units[members[0]]):
            return False
        if _read_in_between(nodes, self.unit_of, set(members) | {unit}):
            return False
        self._add(group, unit)
        return True


def _read_in_between(nodes, unit_of, inside: set[int]) -> bool:
    """True if a unit left out of the group, but placed before its last unit, reads any of
    its values (small ones included): the group would then have to run after its reader."""
    new_last = max(inside)
    for node in nodes:
        for user in node.users:
            k = unit_of.get(user.name, -1)
            if k not in inside and k != -1 and k < new_last:
                return True
    return False


def _attach_quiet_units(units, storages: StorageMap, static: set[str]) -> list[list[fx.Node]]:
    """Put each unit whose values nobody reads but the step's outputs (a batchnorm's
    ``num_batches_tracked + 1``, a weight gradient) into the next unit of its phase, behind
    that unit's head op."""
    out: list[list[fx.Node]] = []
    pending: list[fx.Node] = []
    for unit in units:
        if pending and _is_backward(pending[0]) != _is_backward(unit[0]):
            out.append(pending)
            pending = []
        if _is_quiet(unit, storages, static):
            pending += unit
            continue
        out.append([unit[0]] + pending + unit[1:])
        pending = []
    if pending:
        out.append(pending)
    return out


def _is_quiet(unit: list[fx.Node], storages: StorageMap, static: set[str]) -> bool:
    inside = {n.name for n in unit}
    return all(storages.storage.get(n.name) in static or
               all(u.op == "output" or u.name in inside for u in n.users) for n in unit)


def _absorbable(readers: set[int], members: list[int], keys, units, taken) -> bool:
    if not readers or -1 in readers:
        return False
    last = max(members)
    return all(last < k <= last + FUSE_WINDOW and not taken[k] and keys[k] == keys[members[0]]
               and not _has_random(units[k]) for k in readers)


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

    Static storages cost nothing, and small values (an 8th of the group's largest, such as
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


def reorder_joint(gm: fx.GraphModule, groups: list[Group]) -> None:
    """Lay the joint's ops out group after group, in remat-node order.

    Fusion can place a node's ops after ops of other nodes; reordering makes the joint itself
    run the checkpoint-all schedule exactly (so ``Capture.run`` measures what the graph
    predicts), and makes every node's ops contiguous in the joint.
    """
    nodes = {n.name: n for n in gm.graph.nodes}
    anchor = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    for group in groups:
        for name in group.nodes:
            anchor.append(nodes[name])
            anchor = nodes[name]
    gm.graph.lint()
    gm.recompile()
