"""What each placeholder and output of the joint graph means, read from AOT descriptors."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils import _pytree as pytree

from remat.capture.trace import MODEL_ATTR
from remat.errors import UnsupportedModelError


class InputSpec(NamedTuple):
    """One joint placeholder.

    kind: ``"param"`` / ``"buffer"`` (target: the FQN in the user's model), ``"input"``
    (target: index into the flattened user inputs), ``"tangent"`` (the loss's gradient seed,
    target None).
    """

    kind: str
    target: str | int | None


class OutputSpec(NamedTuple):
    """One joint output.

    kind: ``"loss"``; ``"grad"`` (target: parameter FQN); ``"buffer_update"`` (target: buffer
    FQN; the new value to copy into the buffer); ``"input_grad"`` (target: input index);
    ``"other"`` (target None; a None slot, e.g. the gradient of an integer input).
    """

    kind: str
    target: str | int | None


def _fqn(target: str) -> str:
    prefix = MODEL_ATTR + "."
    return target[len(prefix):] if target.startswith(prefix) else target


def input_spec(desc) -> InputSpec:
    """Map an AOTInput descriptor to an InputSpec; unknown kinds are unsupported."""
    from torch._functorch._aot_autograd import descriptors as d

    if isinstance(desc, d.ParamAOTInput):
        return InputSpec("param", _fqn(desc.target))
    if isinstance(desc, d.BufferAOTInput):
        return InputSpec("buffer", _fqn(desc.target))
    if isinstance(desc, d.PlainAOTInput):
        return InputSpec("input", int(desc.idx))
    if isinstance(desc, d.TangentAOTInput):
        return InputSpec("tangent", None)
    raise UnsupportedModelError(f"capture cannot handle a joint-graph input of kind {desc!r} "
                                "(tensor subclasses, aliased inputs and the like are not supported)")


def output_spec(desc) -> OutputSpec:
    """Map an AOTOutput descriptor to an OutputSpec."""
    from torch._functorch._aot_autograd import descriptors as d

    if desc is None:
        return OutputSpec("other", None)
    if isinstance(desc, d.PlainAOTOutput):
        return OutputSpec("loss", None)
    if isinstance(desc, d.InputMutationAOTOutput):
        base = input_spec(desc.mutated_input)
        if base.kind != "buffer":
            raise UnsupportedModelError(f"the model mutates its {base.kind} {base.target!r} in "
                                        "place; only buffers (BatchNorm statistics) may be mutated")
        return OutputSpec("buffer_update", base.target)
    if isinstance(desc, d.GradAOTOutput):
        base = input_spec(desc.grad_of)
        if base.kind == "param":
            return OutputSpec("grad", base.target)
        if base.kind == "input":
            return OutputSpec("input_grad", base.target)
        return OutputSpec("other", None)
    raise UnsupportedModelError(f"capture cannot handle a joint-graph output of kind {desc!r}")


class InputSignature(NamedTuple):
    """What a captured step was traced for: the inputs' pytree structure and, per leaf, a
    tensor's shape, dtype, device type and ``requires_grad``, or another value's ``repr``.
    Kept instead of the example inputs, which would otherwise stay allocated."""

    structure: object
    leaves: tuple

    @classmethod
    def of(cls, inputs) -> "InputSignature":
        leaves, structure = pytree.tree_flatten(tuple(inputs))
        return cls(structure, tuple(_leaf_signature(x) for x in leaves))

    def check(self, inputs, error: type, done: str, again: str) -> list:
        """The leaves of ``inputs`` once they match; else ``error`` naming the first input
        that differs (``done``: "compiled"/"captured"; ``again``: what the user should do)."""
        leaves, structure = pytree.tree_flatten(tuple(inputs))
        if structure != self.structure:
            raise error(f"the step was {done} for inputs shaped like {self.structure}, got "
                        f"{structure}; {again}")
        for index, (value, expected) in enumerate(zip(leaves, self.leaves)):
            got = _leaf_signature(value)
            if got != expected:
                baked = " (non-tensor inputs are baked into the graph)" \
                    if expected[0] == "value" else ""
                raise error(f"input {index} is {_describe(got)}, but the step was {done} for "
                            f"{_describe(expected)}{baked}; {again}")
        return leaves


def _leaf_signature(value) -> tuple:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device.type, value.requires_grad)
    return ("value", repr(value))


def _describe(signature: tuple) -> str:
    if signature[0] == "tensor":
        _, shape, dtype, device, grad = signature
        return (f"a {device} {str(dtype).replace('torch.', '')} tensor of shape {list(shape)}"
                + (" requiring grad" if grad else ""))
    return f"the value {signature[1]}"
