"""Copies and vector_add against torch, on fresh random inputs, odd lengths, poisoned outputs.

Runs in either mode: tensors live on infralens_lab.device.torch_device() (cpu in interpreter
mode, cuda in gpu mode). A copy moves bits, so every comparison is exact (atol=rtol=0);
the output is filled with NaN first, so an element the kernel forgot to write fails the check.
"""
import re

import pytest
import torch

from infralens_lab.device import is_gpu, torch_device
from infralens_lab.kernels import copies, intro
from infralens_lab.kernels.reference import copy_ref, copy_strided_ref

DEV = torch_device()
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if is_gpu() else [])
# Lengths: a single element, odd sizes, one short of / one past a block, several blocks.
# (copies.block_size(e) is 1024 for float32 and 2048 for 16-bit types.)
LENGTHS = [1, 7, 1000, copies.BLOCK - 1, copies.BLOCK + 1, copies.block_size(2) + 1, 3 * copies.block_size(2) + 5]


def _poisoned(n, dtype):
    return torch.full((n,), float("nan"), dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", LENGTHS)
def test_copy_matches_reference(n, dtype):
    x = torch.randn(n, device=DEV).to(dtype)
    out = _poisoned(n, dtype)
    got = copies.copy(x, out=out)
    assert got is out
    torch.testing.assert_close(got, copy_ref(x), atol=0, rtol=0)  # a copy is bit-exact


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_allocates_output(dtype):
    x = torch.randn(2 * copies.BLOCK + 3, device=DEV).to(dtype)
    got = copies.copy(x)
    assert got.data_ptr() != x.data_ptr()
    torch.testing.assert_close(got, x, atol=0, rtol=0)


@pytest.mark.parametrize("stride", sorted(set(copies.STRIDES) | {3, 7, 64}))
@pytest.mark.parametrize("n", [1, 5, 33, copies.BLOCK * 2 + 17])
def test_copy_strided_matches_reference(n, stride):
    x = torch.randn(n, device=DEV)
    n_out = -(-n // stride)
    out = _poisoned(n_out, x.dtype)
    got = copies.copy_strided(x, stride, out=out)
    assert got is out and got.shape == (n_out,)
    torch.testing.assert_close(got, copy_strided_ref(x, stride), atol=0, rtol=0)  # bit-exact


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stride", [2, 8, 32])
def test_copy_strided_dtypes(dtype, stride):
    x = torch.randn(5003, device=DEV).to(dtype)
    torch.testing.assert_close(copies.copy_strided(x, stride), x[::stride], atol=0, rtol=0)


def test_empty_input_gives_empty_output():
    x = torch.randn(0, device=DEV)
    assert copies.copy(x).numel() == 0
    assert copies.copy_strided(x, 4).numel() == 0


def test_strided_len():
    assert [copies.strided_len(10, s) for s in (1, 2, 3, 4, 10, 11)] == [10, 5, 4, 3, 1, 1]


# --------------------------------------------------------------------------- bad input
def test_wrong_device_is_refused():
    x = torch.randn(16, device="meta")
    with pytest.raises(ValueError, match=r"x is on device 'meta', expected '" + DEV):
        copies.copy(x)
    with pytest.raises(ValueError, match="expected '" + DEV):
        copies.copy_strided(x, 2)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64])
def test_wrong_dtype_is_refused(dtype):
    x = torch.ones(16, device=DEV, dtype=dtype)
    with pytest.raises(TypeError, match=r"x has dtype .*expected one of float32, float16"):
        copies.copy(x)


@pytest.mark.skipif(is_gpu(), reason="bfloat16 is allowed on a GPU")
def test_bf16_refused_in_interpreter():
    x = torch.randn(16, device=DEV).to(torch.bfloat16)
    with pytest.raises(TypeError, match=r"bfloat16.*interpreter"):
        copies.copy_strided(x, 2)


def test_rank_and_contiguity_are_checked():
    with pytest.raises(ValueError, match=r"shape \(4, 4\) \(rank 2\), expected a 1-D tensor"):
        copies.copy(torch.randn(4, 4, device=DEV))
    with pytest.raises(ValueError, match=r"stride \(2,\), expected a contiguous 1-D tensor"):
        copies.copy(torch.randn(16, device=DEV)[::2])
    with pytest.raises(TypeError, match=re.escape("x is a list, expected a torch.Tensor")):
        copies.copy([1.0, 2.0])


@pytest.mark.parametrize("stride,exc,msg", [
    (0, ValueError, "stride is 0, expected an int >= 1"),
    (-2, ValueError, "stride is -2, expected an int >= 1"),
    (2.0, TypeError, r"stride is 2.0 \(float\), expected an int"),
    (True, TypeError, r"stride is True \(bool\), expected an int"),
    ("4", TypeError, r"stride is '4' \(str\)"),
])
def test_bad_stride_is_refused(stride, exc, msg):
    with pytest.raises(exc, match=msg):
        copies.copy_strided(torch.randn(16, device=DEV), stride)


def test_bad_out_is_refused():
    x = torch.randn(10, device=DEV)
    with pytest.raises(ValueError, match=r"out has shape \(10,\), expected \(5,\)"):
        copies.copy_strided(x, 2, out=torch.empty(10, device=DEV))
    with pytest.raises(TypeError, match="out has dtype float16, expected float32"):
        copies.copy(x, out=torch.empty(10, device=DEV, dtype=torch.float16))
    with pytest.raises(ValueError, match="out is on device 'meta'"):
        copies.copy(x, out=torch.empty(10, device="meta"))
    with pytest.raises(ValueError, match="out has strides"):
        copies.copy(x, out=torch.empty(20, device=DEV)[::2])


# --------------------------------------------------------------------------- vector_add (lab 00)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 98, intro.BLOCK_SIZE + 1, 3 * intro.BLOCK_SIZE - 7])
def test_vector_add_matches_torch(n, dtype):
    x, y = (torch.randn(n, device=DEV).to(dtype) for _ in range(2))
    out = _poisoned(n, dtype)
    got = intro.vector_add(x, y, out=out)
    # One addition, rounded once to dtype, same as torch: bit-exact.
    torch.testing.assert_close(got, x + y, atol=0, rtol=0)


def test_vector_add_refuses_mismatch():
    x = torch.randn(8, device=DEV)
    with pytest.raises(ValueError, match=r"x is \(8,\).*y is \(9,\).*expected the same shape"):
        intro.vector_add(x, torch.randn(9, device=DEV))
    with pytest.raises(ValueError, match="y is on device 'meta'"):
        intro.vector_add(x, torch.randn(8, device="meta"))


@pytest.mark.skipif(not is_gpu(), reason="needs 2**31 + elements on a GPU (8 GiB); the interpreter would take hours")
def test_copy_strided_offsets_past_int32():
    """The recorder's largest strided copy reads element 32 * (64 Mi - 1): past 2**31, so the kernel's
    offsets must be 64-bit (with int32 offsets the program faulted there)."""
    stride, n_out = 32, 64 * 2**20 + 3
    x = torch.randn(stride * n_out, device=torch_device())
    out = torch.full((n_out,), float("nan"), device=torch_device())  # poisoned: every element must be written
    copies.copy_strided(x, stride, out=out)
    assert torch.equal(out, x[::stride]), "strided copy is wrong past 2**31 elements"
    del x, out
    torch.cuda.empty_cache()


@pytest.mark.skipif(is_gpu(), reason="allocates 4 GiB of (untouched, virtual) host memory")
def test_element_limits_are_explained():
    """torch.empty on the host maps pages lazily, so a 2**31-element tensor costs no real memory here."""
    big = torch.empty(2**31, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"x has 2147483648 elements, expected at most 2147483647 \(int32"):
        copies.copy(big)
    with pytest.raises(ValueError, match=r"x\[::1\] has 2147483648 elements, expected at most 2147483647"):
        copies.copy_strided(big, 1)
