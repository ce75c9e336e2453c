"""Helpers the benchmarks, the demo and the tests share."""
from __future__ import annotations


def eager_step(model, loss_fn=None):
    """The plain PyTorch training step remat is compared with: ``step(*inputs)`` runs forward
    and ``loss.backward()`` (grads accumulate in ``p.grad``) and returns the detached loss."""

    def step(*inputs):
        loss = loss_fn(model, *inputs) if loss_fn else model(*inputs)
        loss.backward()
        return loss.detach()

    return step
