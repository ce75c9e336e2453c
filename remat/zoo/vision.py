"""torchvision models (built from code, no weights) and width-scaled tiny variants.

A tiny variant keeps the architecture (depth, block structure, skip connections, dropout,
batchnorm) and divides the channel widths, so that it captures in seconds on a small CPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision import models
from torchvision.models.resnet import Bottleneck, ResNet
from torchvision.models.segmentation.fcn import FCN, FCNHead


def classification_loss(model: nn.Module, images: torch.Tensor, labels: torch.Tensor):
    """Cross-entropy of the model's logits."""
    return F.cross_entropy(model(images), labels)


def segmentation_loss(model: nn.Module, images: torch.Tensor, masks: torch.Tensor):
    """Per-pixel cross-entropy of a torchvision segmentation model's ``"out"`` logits."""
    return F.cross_entropy(model(images)["out"], masks)


def _vgg_layers(config: list, divide: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    channels = 3
    for item in config:
        if item == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            width = max(1, item // divide)
            layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            channels = width
    return nn.Sequential(*layers)


def vgg(depth: int, tiny: bool, num_classes: int) -> nn.Module:
    """VGG16/19 (torchvision's configs "D"/"E"); tiny: widths / 16, classifier 128 wide."""
    if not tiny:
        return getattr(models, f"vgg{depth}")(weights=None, num_classes=num_classes)
    from torchvision.models.vgg import VGG, cfgs

    features = _vgg_layers(cfgs["D" if depth == 16 else "E"], divide=16)
    model = VGG(features, num_classes=num_classes, init_weights=True)
    hidden = 128
    model.classifier = nn.Sequential(
        nn.Linear(32 * 7 * 7, hidden), nn.ReLU(True), nn.Dropout(0.5),
        nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(hidden, num_classes))
    return model


def resnet50(width: int = 64, num_classes: int = 1000, dilate=(False, False, False)) -> ResNet:
    """ResNet-50 (Bottleneck, [3, 4, 6, 3]); ``width`` is the stem width (64 in the paper)."""
    model = ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes,
                   replace_stride_with_dilation=list(dilate))
    if width == 64:
        return model
    model.inplanes, model.dilation = width, 1
    model.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
    model.bn1 = nn.BatchNorm2d(width)
    model.layer1 = model._make_layer(Bottleneck, width, 3)
    model.layer2 = model._make_layer(Bottleneck, 2 * width, 4, stride=2, dilate=dilate[0])
    model.layer3 = model._make_layer(Bottleneck, 4 * width, 6, stride=2, dilate=dilate[1])
    model.layer4 = model._make_layer(Bottleneck, 8 * width, 3, stride=2, dilate=dilate[2])
    model.fc = nn.Linear(8 * width * Bottleneck.expansion, num_classes)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return model


def fcn_resnet50(tiny: bool, num_classes: int = 21) -> nn.Module:
    """FCN with a dilated ResNet-50 backbone (torchvision's fcn_resnet50, no aux head)."""
    if not tiny:
        return models.segmentation.fcn_resnet50(weights=None, weights_backbone=None,
                                                num_classes=num_classes, aux_loss=False)
    from torchvision.models._utils import IntermediateLayerGetter

    width = 8
    backbone = resnet50(width, dilate=(False, True, True))
    backbone = IntermediateLayerGetter(backbone, return_layers={"layer4": "out"})
    return FCN(backbone, FCNHead(8 * width * Bottleneck.expansion, num_classes), None)


def mobilenet_v2(tiny: bool, num_classes: int = 1000) -> nn.Module:
    return models.mobilenet_v2(weights=None, num_classes=num_classes,
                               width_mult=0.25 if tiny else 1.0)
