"""The original U-Net (Ronneberger et al., 2015): unpadded 3x3 convolutions, 2x2 max pooling,
2x2 up-convolutions, cropped skip connections; 572x572 in, 388x388 out, widths 64..1024."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _double_conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3), nn.ReLU(inplace=True),
                         nn.Conv2d(c_out, c_out, 3), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """``depth`` poolings; ``width`` channels at the top level (64 in the paper)."""

    def __init__(self, in_channels: int = 1, num_classes: int = 2, width: int = 64, depth: int = 4):
        super().__init__()
        widths = [width * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList([_double_conv(in_channels, widths[0])] +
                                  [_double_conv(widths[i], widths[i + 1]) for i in range(depth)])
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList([nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2)
                                 for i in reversed(range(depth))])
        self.up_conv = nn.ModuleList([_double_conv(2 * widths[i], widths[i])
                                      for i in reversed(range(depth))])
        self.head = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = self.pool(x)
        for up, conv, skip in zip(self.up, self.up_conv, reversed(skips)):
            x = up(x)
            x = conv(torch.cat([_center_crop(skip, x.shape[-2:]), x], dim=1))
        return self.head(x)


def _center_crop(x: torch.Tensor, size) -> torch.Tensor:
    top = (x.shape[-2] - size[0]) // 2
    left = (x.shape[-1] - size[1]) // 2
    return x[..., top:top + size[0], left:left + size[1]]


def output_size(input_size: int, depth: int = 4) -> int:
    """Side of the output map for a square input (the paper: 572 -> 388)."""
    size = input_size
    for _ in range(depth):
        size = size - 4
        if size % 2:
            raise ValueError(f"U-Net input {input_size} is not valid: an odd map ({size}) would be pooled")
        size //= 2
    size -= 4
    for _ in range(depth):
        size = 2 * size - 4
    if size <= 0:
        raise ValueError(f"U-Net input {input_size} is too small")
    return size


def segmentation_loss(model: nn.Module, images: torch.Tensor, masks: torch.Tensor):
    """Per-pixel cross-entropy (the paper adds a weight map; plain here)."""
    return F.cross_entropy(model(images), masks)
