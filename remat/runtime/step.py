"""``CompiledStep``: one training step that runs a solved schedule."""
from __future__ import annotations

import dataclasses

import torch

from remat.capture.specs import InputSignature
from remat.errors import RematError, UnsupportedModelError
from remat.runtime.rewrite import ScheduledStep, schedule_joint


class InputMismatchError(RematError, ValueError):
    """A compiled step was called with inputs unlike the example it was compiled for."""


class CompiledStep:
    """``loss = step(*inputs)`` runs forward and backward by ``step.solution``'s plan.

    Gradients accumulate into ``p.grad`` exactly as ``loss.backward()`` would, buffers (BatchNorm
    statistics) update as in eager mode, and the loss comes back detached. Inputs must have the
    example's shapes, dtypes and devices: other inputs raise ``InputMismatchError`` (compile again
    for them).
    """

    def __init__(self, capture, solution, distributed=None):
        self.capture = capture
        self.solution = solution
        self.model = capture.model
        self._distributed = distributed
        self._scheduled: ScheduledStep = schedule_joint(
            capture.joint, capture.node_groups, solution.plan, capture.placeholders,
            capture.outputs)
        # keep the signature, not the example batch: it would stay allocated beside every
        # later batch, memory the budget does not count
        self._signature = InputSignature.of(capture.example_inputs)
        self.capture = capture = dataclasses.replace(capture, example_inputs=None)
        self._tangent = _loss_tangent(capture)
        self._sources = _sources(capture)
        self._buffer_owners = [_owner(self.model, target, "buffer")
                               for target in self._scheduled.buffer_targets]

    @property
    def graph(self):
        """The captured remat graph the solution is for."""
        return self.capture.graph

    @property
    def module(self) -> torch.fx.GraphModule:
        """The generated fx module: ``module(*joint_args) -> (loss, *new_buffers)``."""
        return self._scheduled.module

    @property
    def code(self) -> str:
        """The generated Python code of the step, for inspection."""
        return self._scheduled.module.code

    @property
    def op_counts(self):
        """How many times the step executes each aten op (Counter by op overload)."""
        return self._scheduled.op_counts.copy()

    @property
    def times_computed(self) -> tuple[int, ...]:
        """How many times the step computes each remat node (the column sums of R)."""
        return self._scheduled.times_computed

    def __call__(self, *inputs) -> torch.Tensor:
        leaves = self._check_inputs(inputs)
        if self._distributed is not None:
            self._distributed.before_step()
        args = self._joint_args(leaves)
        with torch.no_grad():
            loss, *new_buffers = self._scheduled.module(*args)
            del args
            self._write_buffers(new_buffers)
        if self._distributed is not None:
            self._distributed.after_step()
        return loss

    def explain(self) -> str:
        """Which values are kept, which recomputed and how often, the peak, and the code."""
        from remat.runtime.explain import explain

        return explain(self)

    def __repr__(self) -> str:
        sol = self.solution
        return (f"CompiledStep(method={sol.method!r}, nodes={self.graph.size}, "
                f"predicted_peak={sol.peak_memory:.0f} B, overhead={sol.overhead:.3f})")

    # ----- internals ---------------------------------------------------------------------
    def _check_inputs(self, inputs) -> list:
        """The inputs' leaves, once their structure and signature match the example's."""
        return self._signature.check(inputs, InputMismatchError, "compiled",
                                     "call remat.compile(model, new_inputs, ...) for them")

    def _joint_args(self, flat_inputs: list) -> list:
        """The joint graph's inputs: the model's parameters and buffers (read from their
        modules now, so a moved or replaced tensor is used), the user inputs, the loss tangent."""
        args = []
        for kind, source in self._sources:
            if kind == "input":
                args.append(flat_inputs[source])
            elif kind == "tangent":
                args.append(self._tangent)
            else:  # a parameter or buffer: (owning module, attribute dict name, key)
                owner, table, key = source
                args.append(getattr(owner, table)[key])
        return args

    def _write_buffers(self, new_buffers) -> None:
        """Copy the new buffer values (BatchNorm statistics) into the model's buffers."""
        if new_buffers:
            targets = [owner._buffers[key] for owner, _, key in self._buffer_owners]
            torch._foreach_copy_(targets, list(new_buffers))


def _sources(capture) -> list[tuple]:
    """Where each joint input comes from, resolved once: the module owning each parameter
    and buffer (a dict lookup per step instead of walking the model)."""
    out = []
    for spec, node in zip(capture.placeholders, _placeholder_nodes(capture.joint)):
        if spec.kind in ("param", "buffer"):
            out.append((spec.kind, _owner(capture.model, spec.target, spec.kind)))
        elif spec.kind in ("input", "tangent"):
            out.append((spec.kind, spec.target))
        else:
            raise UnsupportedModelError(f"joint graph input {node.name!r} ({spec!r}) has a kind "
                                        "the runtime cannot supply")
    return out


def _owner(model: torch.nn.Module, target: str, kind: str) -> tuple:
    path, _, key = target.rpartition(".")
    owner = model.get_submodule(path) if path else model
    table = "_parameters" if kind == "param" else "_buffers"
    if key not in getattr(owner, table):
        raise UnsupportedModelError(f"the model has no {kind} {target!r}, which the captured "
                                    "step reads; capture the model again")
    return owner, table, key


def _loss_tangent(capture) -> torch.Tensor | None:
    """The seed of the backward pass (ones like the loss), made once."""
    for spec, node in zip(capture.placeholders, _placeholder_nodes(capture.joint)):
        if spec.kind == "tangent":
            value = node.meta.get("val")
            if not isinstance(value, torch.Tensor):
                raise UnsupportedModelError(f"joint graph input {node.name!r}: the loss tangent "
                                            "has no recorded shape; capture the model again")
            return torch.ones(value.shape, dtype=value.dtype, device=value.device)
    return None


def _placeholder_nodes(joint: torch.fx.GraphModule) -> list:
    return [n for n in joint.graph.nodes if n.op == "placeholder"]
