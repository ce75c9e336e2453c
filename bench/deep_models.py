"""Deeper variants of the tiny zoo, for the solver benchmarks: real depth, tiny width.

    PYTHONPATH=. remat capture bench.deep_models:gpt2_12 --cost-model flops --granularity op \
        --order trace -o bench/graphs/gpt2_12-op.json

The tiny zoo's GPT-2 has 2 layers (129 nodes at op level); ``gpt2_12`` has GPT-2's own 12,
with the tiny width, batch and sequence (679 nodes at op level): a chain of identical
blocks, the shape of the models people train, at the size of the largest random DAGs in
bench_bounds.py.
"""
from __future__ import annotations

from dataclasses import replace

import torch


def gpt2_12(batch_size: int | None = None):
    """(model, (tokens, targets)): the tiny zoo GPT-2 with 12 layers; the model returns the
    loss."""
    from remat.zoo import _gpt2_config
    from remat.zoo.gpt2 import GPT2

    config = replace(_gpt2_config(tiny=True), n_layer=12)
    with torch.random.fork_rng():  # the weights of seed 0; the caller's state untouched
        torch.manual_seed(0)
        model = GPT2(config)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch_size or 4, config.n_positions + 1),
                        generator=gen)
    return model, (ids[:, :-1].contiguous(), ids[:, 1:].contiguous())
