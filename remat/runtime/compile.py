"""``remat.compile``: capture a training step, solve its schedule, return a runnable step."""
from __future__ import annotations

import torch

from remat.runtime.cache import cached_solve
from remat.runtime.step import CompiledStep


def compile(model: torch.nn.Module, example_inputs, loss_fn=None, budget="60%",
            method: str = "auto", cache=True, cost_model: str = "profile",
            granularity: str = "module", order: str = "memory", **options) -> CompiledStep:
    """Compile one training step of ``model`` to run within ``budget``.

    Parameters
    ----------
    model
        A module; a ``DistributedDataParallel`` wrapper is unwrapped and its gradients are
        averaged over the process group after each step, as DDP does.
    example_inputs
        A tuple of inputs (a single tensor is accepted too); ``step(*inputs)`` must get inputs
        of the same shapes, dtypes and devices.
    loss_fn
        ``loss_fn(model, *inputs) -> scalar``; by default ``model(*inputs)`` is the loss.
    budget, method, **options
        As for ``remat.solve`` (``"60%"``, ``"1.5GiB"``, bytes; ``time_limit=...``).
    cache
        True: reuse solutions stored under ``remat.runtime.cache.default_cache_dir()``;
        a directory path: store them there; False: always solve.
    cost_model, granularity, order
        Passed to ``remat.capture``.

    Compiling never changes the model's parameters or buffers.
    """
    from remat.capture import capture

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    distributed = _distributed(model)
    inner = distributed.module if distributed is not None else model
    captured = capture(inner, tuple(example_inputs), loss_fn=loss_fn, cost_model=cost_model,
                       granularity=granularity, order=order)
    solution = cached_solve(captured.graph, budget, method, cache=cache, cost_model=cost_model,
                            **options)
    return CompiledStep(captured, solution, distributed=distributed)


def _distributed(model):
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        from remat.runtime.distributed import GradientSync

        return GradientSync(model)
    return None
