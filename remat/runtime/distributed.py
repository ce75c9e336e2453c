"""Running a compiled step under ``DistributedDataParallel``.

The step does not use autograd, so DDP's gradient hooks never fire; this class does what DDP
would: broadcast buffers from rank 0 before the step (when DDP syncs buffers) and average the
gradients over the process group after it (unless inside ``ddp.no_sync()``), in buckets of at
most DDP's ``bucket_bytes_cap`` bytes (one all_reduce per bucket, as DDP does; the flat copy of
one bucket is the only memory it adds, after the step's peak).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


class GradientSync:
    """DDP's communication around one compiled step."""

    def __init__(self, ddp: torch.nn.parallel.DistributedDataParallel):
        self.ddp = ddp
        self.module = ddp.module
        self.group = ddp.process_group

    def before_step(self) -> None:
        if not self.ddp.will_sync_module_buffers():
            return
        source = dist.get_global_rank(self.group, 0)
        with torch.no_grad():
            handles = [dist.broadcast(b, src=source, group=self.group, async_op=True)
                       for b in self.module.buffers()]
            for handle in handles:
                handle.wait()

    def after_step(self) -> None:
        if not self.ddp.require_backward_grad_sync:
            return
        grads = [p.grad for p in self.module.parameters() if p.requires_grad and p.grad is not None]
        world = dist.get_world_size(self.group)
        with torch.no_grad():
            pending = []
            for bucket in _buckets(grads, int(getattr(self.ddp, "bucket_bytes_cap", 25 << 20))):
                flat = _flatten_dense_tensors(bucket)
                pending.append((bucket, flat, dist.all_reduce(flat, group=self.group,
                                                              async_op=True)))
            for bucket, flat, handle in pending:
                handle.wait()
                flat.div_(world)
                for grad, reduced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                    grad.copy_(reduced)


def _buckets(grads: list[torch.Tensor], cap: int) -> list[list[torch.Tensor]]:
    """Consecutive gradients of one dtype and device, at most ``cap`` bytes per bucket (a
    larger gradient gets a bucket of its own)."""
    buckets: list[list[torch.Tensor]] = []
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        last = buckets[-1] if buckets else None
        if last and (last[0].dtype, last[0].device) == (grad.dtype, grad.device) \
                and size + nbytes <= cap:
            last.append(grad)
            size += nbytes
        else:
            buckets.append([grad])
            size = nbytes
    return buckets
