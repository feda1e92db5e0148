"""ResNet-50 defined in the package: torchvision's structure (parameter count, blocks, strides),
a forward on a small input, the two memory formats, and clear errors for bad arguments."""
from __future__ import annotations

import pytest
import torch

from infralens_lab.workloads.resnet import RESNET50_PARAMS, Bottleneck, ResNet, inference_step, resnet50


def test_parameter_count_is_resnet50s():
    assert resnet50().num_params() == RESNET50_PARAMS == 25_557_032


def test_structure_matches_torchvision_layout():
    m = resnet50()
    assert [len(getattr(m, f"layer{i}")) for i in range(1, 5)] == [3, 4, 6, 3]
    convs = [mod for mod in m.modules() if isinstance(mod, torch.nn.Conv2d)]
    assert len(convs) == 53  # stem + 16 blocks x 3 + 4 downsample projections
    for i, stride in zip(range(1, 5), (1, 2, 2, 2), strict=True):
        first = getattr(m, f"layer{i}")[0]
        assert isinstance(first, Bottleneck) and first.downsample is not None
        assert first.conv2.stride == (stride, stride) and first.conv1.stride == (1, 1)  # v1.5: stride on the 3x3
    assert m.fc.in_features == 2048 and m.fc.out_features == 1000


def test_forward_shape_and_formats_agree():
    torch.manual_seed(0)
    first = inference_step(batch=2, size=64, memory_format="channels_first", device="cpu")
    last = inference_step(batch=2, size=64, memory_format="channels_last", device="cpu")
    assert last.x.is_contiguous(memory_format=torch.channels_last) and not last.x.is_contiguous()
    y1, y2 = first(), last()
    assert y1.shape == (2, 1000)
    # same seed: same weights and input; only the layout differs, so outputs agree to fp32 rounding
    torch.testing.assert_close(y1, y2, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kwargs, match", [
    (dict(memory_format="nhwc"), "memory_format='nhwc'"),
    (dict(batch=0), "batch=0"),
    (dict(size=8), "size=8"),
])
def test_bad_step_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        inference_step(device="cpu", **kwargs)


def test_bad_model_arguments_and_input():
    with pytest.raises(ValueError, match="expected four positive ints"):
        ResNet((3, 4, 6))
    with pytest.raises(ValueError, match="expected a positive int"):
        resnet50(num_classes=0)
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\)"):
        resnet50()(torch.randn(1, 1, 32, 32))
