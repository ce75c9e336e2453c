"""Running a compiled step under ``DistributedDataParallel``.

The step does not use autograd, so DDP's gradient hooks never fire; this class does what DDP
would: broadcast buffers from rank 0 before the step (when DDP syncs buffers) and average the
gradients over the process group after it (unless inside ``ddp.no_sync()``).
"""
from __future__ import annotations

import torch
import torch.distributed as dist


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
            handles = [dist.all_reduce(g, group=self.group, async_op=True) for g in grads]
            for handle, grad in zip(handles, grads):
                handle.wait()
                grad.div_(world)
