"""Functions the generated step code calls besides aten ops.

They live at module level so that fx's code generator can import them by name, and so the
generated code reads plainly in ``step.explain()``.
"""
from __future__ import annotations

import torch


def is_random(target) -> bool:
    """True for ops that draw from a random generator (dropout, rand, bernoulli, ...)."""
    tags = getattr(target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def save_rng_state(device: torch.device) -> torch.Tensor:
    """The generator state of ``device``, taken just before a random op runs the first time."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    if device.type != "cpu":
        raise NotImplementedError(f"saving the random state of device {device} is not supported")
    return torch.get_rng_state()


def run_with_rng_state(state: torch.Tensor, device: torch.device, op, *args, **kwargs):
    """Replay a random op with the state it first ran with, then restore the current state.

    A recomputed dropout must draw the same mask as the original, or gradients go wrong; and
    the ops that follow must see the generator as if the replay never happened.
    """
    device = torch.device(device)
    current = save_rng_state(device)
    _set_rng_state(device, state)
    try:
        return op(*args, **kwargs)
    finally:
        _set_rng_state(device, current)


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def accumulate_grad(param: torch.Tensor, grad: torch.Tensor) -> None:
    """Add ``grad`` into ``param.grad`` as ``loss.backward()`` would.

    Called right after the gradient is computed, so the step never holds a gradient beyond
    what ``p.grad`` itself holds (which the budget counts as static memory).
    """
    if param.grad is None:
        param.grad = _obey_layout(param, grad)
    else:
        param.grad.add_(grad)


def accumulate_input_grad(tensor: torch.Tensor, grad: torch.Tensor) -> None:
    """Like ``accumulate_grad`` for a user input, which ``loss.backward()`` fills only when
    the input is a leaf that requires grad."""
    if tensor.requires_grad and tensor.is_leaf:
        accumulate_grad(tensor, grad)


def _obey_layout(param: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """A gradient with the parameter's strides (autograd's layout contract)."""
    if grad.stride() == param.stride() or not _dense(param):
        return grad
    out = torch.empty_strided(param.size(), param.stride(), dtype=grad.dtype, device=grad.device)
    return out.copy_(grad)


def _dense(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last)
