"""Turn a plan over remat nodes into one fx graph that runs it.

Every ``("compute", i)`` of the plan emits a copy of the joint graph's fx nodes in
``node_groups[i]``; a node reads the latest copy of each value it needs. fx's code generator
then frees every value right after its last use, which is never later than the plan frees it.
Random ops that run more than once replay the generator state of their first run; gradients
are added into ``p.grad`` (and a leaf input's ``.grad``) right after their first computation;
the loss and the new buffer values are returned and copied back by the caller: a buffer must
not change while the step may still recompute an op that reads it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
import torch.fx as fx

from remat.errors import InvalidScheduleError, UnsupportedModelError
from remat.runtime import ops


@dataclass(frozen=True)
class ScheduledStep:
    """The generated step and what it will execute.

    ``module(*joint_args)`` returns ``(loss, *new_buffer_values)``; ``buffer_targets`` names the
    buffers in that order. ``op_counts`` counts the aten ops the code executes, by overload;
    ``times_computed[i]`` is how often remat node i runs.
    """

    module: fx.GraphModule
    buffer_targets: tuple[str, ...]
    op_counts: Counter
    times_computed: tuple[int, ...]


def schedule_joint(joint: fx.GraphModule, node_groups, plan, placeholders, outputs) -> ScheduledStep:
    """Build the step that runs ``plan`` (a list of ("compute", i) / ("free", i))."""
    emitter = _Emitter(joint, node_groups, plan, placeholders, outputs)
    for action, node in plan:
        if action == "compute":
            emitter.compute(int(node))
        elif action == "free":
            emitter.free(int(node))
        else:
            raise InvalidScheduleError(f"plan step {action!r} on node {node}: a plan holds only "
                                       "'compute' and 'free' steps")
    return emitter.finish()


class _Emitter:
    """The state of one rewrite: the new graph and, per joint node, its latest copy."""

    def __init__(self, joint, node_groups, plan, placeholders, outputs):
        self.joint = joint
        self.groups = [tuple(g) for g in node_groups]
        self.source = {n.name: n for n in joint.graph.nodes}
        self.group_of = _group_index(self.source, self.groups)
        self.graph = fx.Graph()
        self.latest: dict[str, fx.Node] = {}
        self.first: dict[str, fx.Node] = {}
        self.times = [0] * len(self.groups)
        self.alive: set[int] = set()
        self.rng_state: dict[str, fx.Node] = {}
        self.replayed = _replayed_random_nodes(self.source, self.groups, plan)
        self.grad_of = _grad_params(joint, placeholders, outputs)
        self.outputs = outputs
        self.op_counts: Counter = Counter()
        self._add_inputs(placeholders)

    def _add_inputs(self, placeholders) -> None:
        found = [n for n in self.joint.graph.nodes if n.op == "placeholder"]
        if len(found) != len(placeholders):
            raise UnsupportedModelError(f"the joint graph has {len(found)} inputs but the capture "
                                        f"describes {len(placeholders)}; capture the model again")
        for node in self.joint.graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                self.latest[node.name] = self.first[node.name] = self.graph.node_copy(node)
            elif node.op not in ("call_function", "output"):
                raise UnsupportedModelError(f"joint graph node {node.name!r} is a {node.op}; the "
                                            "runtime runs only functional aten graphs")

    def compute(self, index: int) -> None:
        if not 0 <= index < len(self.groups):
            raise InvalidScheduleError(f"plan computes node {index}, but the capture has "
                                       f"{len(self.groups)} nodes")
        copy = self.times[index]
        for name in self.groups[index]:
            self._emit(self.source[name], index, copy)
        self.times[index] += 1
        self.alive.add(index)

    def free(self, index: int) -> None:
        self.alive.discard(index)

    def _emit(self, node: fx.Node, index: int, copy: int) -> None:
        args = fx.map_arg(node.args, lambda n: self._read(n, index, node))
        kwargs = fx.map_arg(node.kwargs, lambda n: self._read(n, index, node))
        name = node.name if copy == 0 else f"{node.name}_rc{copy}"
        new = self._call(node, args, kwargs, name, copy)
        new.meta.update(node.meta, remat_node=index, remat_copy=copy)
        if isinstance(node.target, torch._ops.OpOverload):
            self.op_counts[node.target] += 1
        self.latest[node.name] = new
        if copy == 0:
            self.first[node.name] = new
            for accumulate, holder in self.grad_of.get(node.name, ()):
                self.graph.call_function(accumulate, (self.latest[holder], new))

    def _call(self, node, args, kwargs, name, copy) -> fx.Node:
        if node.name not in self.replayed:
            return self.graph.create_node("call_function", node.target, args, kwargs, name=name)
        device = _device_of(node)
        if copy == 0:
            self.rng_state[node.name] = self.graph.call_function(
                ops.save_rng_state, (device,), name=f"rng_state_{node.name}")
            return self.graph.create_node("call_function", node.target, args, kwargs, name=name)
        replay_args = (self.rng_state[node.name], device, node.target) + tuple(args)
        return self.graph.create_node("call_function", ops.run_with_rng_state, replay_args,
                                      kwargs, name=name)

    def _read(self, producer: fx.Node, index: int, reader: fx.Node) -> fx.Node:
        """The copy of ``producer`` that ``reader`` (in remat node ``index``) must read."""
        owner = self.group_of.get(producer.name)
        if owner is not None and owner != index and owner not in self.alive:
            raise InvalidScheduleError(
                f"fx node {reader.name!r} of remat node {index} reads {producer.name!r} of remat "
                f"node {owner}, which the plan has freed or not computed yet; the graph's "
                f"dependencies miss {owner} -> {index}, or the plan is invalid")
        if producer.name not in self.latest:
            raise InvalidScheduleError(f"fx node {reader.name!r} of remat node {index} reads "
                                       f"{producer.name!r} before it is computed")
        return self.latest[producer.name]

    def finish(self) -> ScheduledStep:
        missing = [i for i, t in enumerate(self.times) if t == 0]
        if missing:
            raise InvalidScheduleError(f"the plan never computes remat node {missing[0]}")
        loss, buffers, targets = None, [], []
        for spec, node in zip(self.outputs, _joint_outputs(self.joint)):
            value = None if node is None else self.first[node.name]
            if spec.kind == "loss":
                loss = value
            elif spec.kind == "buffer_update" and value is not None:
                buffers.append(value)
                targets.append(spec.target)
        if loss is None:
            raise UnsupportedModelError("the capture marks no output as the loss")
        self.graph.output((loss, *buffers))
        self.graph.lint()
        module = fx.GraphModule(self.joint, self.graph)
        return ScheduledStep(module, tuple(targets), self.op_counts, tuple(self.times))


def _group_index(source: dict, groups) -> dict[str, int]:
    owner: dict[str, int] = {}
    for index, group in enumerate(groups):
        for name in group:
            if name not in source:
                raise UnsupportedModelError(f"remat node {index} names fx node {name!r}, which "
                                            "the joint graph lacks")
            if name in owner:
                raise UnsupportedModelError(f"fx node {name!r} is in remat nodes {owner[name]} "
                                            f"and {index}; each must be in exactly one")
            owner[name] = index
    loose = [n for n, node in source.items() if node.op == "call_function" and n not in owner]
    if loose:
        raise UnsupportedModelError(f"fx node {loose[0]!r} belongs to no remat node")
    return owner


def _replayed_random_nodes(source: dict, groups, plan) -> frozenset[str]:
    """Random fx nodes whose group the plan computes more than once."""
    runs = Counter(int(node) for action, node in plan if action == "compute")
    return frozenset(name for index, group in enumerate(groups) if runs[index] > 1
                     for name in group if ops.is_random(source[name].target))


def _joint_outputs(joint: fx.GraphModule) -> list:
    output = next(n for n in joint.graph.nodes if n.op == "output")
    values = output.args[0]
    return list(values) if isinstance(values, (tuple, list)) else [values]


def _grad_params(joint: fx.GraphModule, placeholders, outputs) -> dict[str, list[tuple]]:
    """fx node name of each gradient -> [(accumulate function, placeholder name), ...]."""
    nodes = [n for n in joint.graph.nodes if n.op == "placeholder"]
    by_spec = {(spec.kind, spec.target): node.name for node, spec in zip(nodes, placeholders)}
    kinds = {"grad": ("param", ops.accumulate_grad),
             "input_grad": ("input", ops.accumulate_input_grad)}
    grads: dict[str, list[tuple]] = {}
    for spec, node in zip(outputs, _joint_outputs(joint)):
        if spec.kind not in kinds or node is None:
            continue
        kind, accumulate = kinds[spec.kind]
        if (kind, spec.target) not in by_spec:
            raise UnsupportedModelError(f"gradient output for {kind} {spec.target!r} has no "
                                        "matching joint graph input")
        grads.setdefault(node.name, []).append((accumulate, by_spec[kind, spec.target]))
    return grads


def _device_of(node: fx.Node) -> torch.device:
    value = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        value = value[0]
    return value.device if isinstance(value, torch.Tensor) else torch.device("cpu")
