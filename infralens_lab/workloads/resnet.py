"""ResNet-50, defined here with the same layers as torchvision's ``resnet50`` (random weights).

Why not torchvision itself: no CPU wheel of torchvision that matches the CPU torch this project
installs is reachable (``pip install torchvision`` pulls a CUDA torch in with it), and a profile
needs the model's *structure*, not its weights: the kernels, their shapes and their time do not
depend on the values. So this module rebuilds the structure, layer for layer: a 7×7/2 stem
convolution, batch norm, ReLU and 3×3/2 max pool; four stages of Bottleneck blocks ([3, 4, 6, 3],
widths 64, 128, 256, 512, expansion 4, the stride on the 3×3 convolution as in torchvision's
"ResNet v1.5"); global average pooling and a 2048→1000 linear layer. Its parameter count is
ResNet-50's, 25,557,032 (:data:`RESNET50_PARAMS`; a test holds it to that). Nothing is downloaded.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..device import torch_device

RESNET50_PARAMS = 25_557_032  # torchvision.models.resnet50().parameters(), summed
RESNET50_LAYERS = (3, 4, 6, 3)


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3 (carrying the stride), 1×1 expand (×4), each with batch norm; ReLU after the sum."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """The ResNet of He et al. (2016) with Bottleneck blocks; ``layers`` = blocks per stage."""

    def __init__(self, layers: tuple[int, ...] = RESNET50_LAYERS, num_classes: int = 1000):
        super().__init__()
        if len(layers) != 4 or not all(isinstance(n, int) and n >= 1 for n in layers):
            raise ValueError(f"layers={layers!r}; expected four positive ints (ResNet-50: {RESNET50_LAYERS})")
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes={num_classes!r}; expected a positive int")
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(64, layers[0], 1)
        self.layer2 = self._stage(128, layers[1], 2)
        self.layer3 = self._stage(256, layers[2], 2)
        self.layer4 = self._stage(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for m in self.modules():  # torchvision's initialisation (the values do not matter for timing)
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        down = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            down = nn.Sequential(nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                                 nn.BatchNorm2d(planes * Bottleneck.expansion))
        mods = [Bottleneck(self.inplanes, planes, stride, down)]
        self.inplanes = planes * Bottleneck.expansion
        mods += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x):
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"input of shape {tuple(x.shape)}; expected (batch, 3, height, width)")
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def resnet50(num_classes: int = 1000) -> ResNet:
    """ResNet-50 with random weights (torchvision's layer structure; see the module doc)."""
    return ResNet(RESNET50_LAYERS, num_classes)


MEMORY_FORMATS = {"channels_first": torch.contiguous_format, "channels_last": torch.channels_last}


def inference_step(batch: int = 1, size: int = 224, memory_format: str = "channels_first", dtype=torch.float32,
                   device: str | None = None, seed: int = 0):
    """A callable running one ResNet-50 forward under ``torch.inference_mode`` on one fixed batch
    ``(batch, 3, size, size)``, model and input in ``memory_format`` (``'channels_first'`` = NCHW,
    ``'channels_last'`` = NHWC in memory) and ``dtype``. ``.model`` and ``.x`` are attached."""
    if memory_format not in MEMORY_FORMATS:
        raise ValueError(f"memory_format={memory_format!r}; expected one of {sorted(MEMORY_FORMATS)}")
    for name, v, lo in (("batch", batch, 1), ("size", size, 32)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}={v!r}; expected an int >= {lo}")
    device = device or torch_device()
    fmt = MEMORY_FORMATS[memory_format]
    torch.manual_seed(seed)
    model = resnet50().eval().to(device=device, dtype=dtype, memory_format=fmt)
    x = torch.randn(batch, 3, size, size, device=device, dtype=dtype).contiguous(memory_format=fmt)

    def step():
        with torch.inference_mode():
            return model(x)

    step.model, step.x = model, x
    return step
