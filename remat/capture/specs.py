"""What each placeholder and output of the joint graph means, read from AOT descriptors."""
from __future__ import annotations

from typing import NamedTuple

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
