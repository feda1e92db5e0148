"""The package's default fast attention (kernels.attention_default): the dispatch rule with faked capabilities,
the CPU/interpreter path unchanged (attn_fwd_fast, checked against the reference on fresh random inputs), the
Gluon branch reached on Hopper at D = 128 (on a CPU its wrapper refuses the CPU tensors by name), bad input named."""
import pytest
import torch

from infralens_lab.device import torch_device
from infralens_lab.kernels import attention_default as ad
from infralens_lab.kernels import attention_gluon as ag
from infralens_lab.kernels.check import TOLERANCES
from infralens_lab.kernels.reference import attention_ref

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


@pytest.mark.parametrize("cc", [(9, 0), 90, "9.0", "sm_90"])
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_hopper_d128_is_gluon(cc, dtype):
    c = ad.choose(128, dtype, cc)
    assert (c.kernel, c.function) == ad.GLUON and "run 12" in c.why


@pytest.mark.parametrize("head_dim,dtype,cc,on_gpu,word", [
    (64, F16, (9, 0), True, "D = 64"),  # measured below SDPA's default at D = 64: not adopted there
    (64, BF16, (9, 0), True, "D = 64"),
    (128, F32, (9, 0), True, "float32"),  # wgmma operands are 16-bit
    (128, F16, (8, 0), True, "8.x"),  # Ampere
    (128, F16, (10, 0), True, "10.x"),  # Blackwell: the Gluon kernel is sm_90 only
    (128, F16, (12, 0), True, "12.x"),
    (128, F16, None, True, "no GPU"),
    (128, F16, (9, 0), False, "no GPU"),  # interpreter mode: never the Gluon kernel
    (96, F16, (9, 0), True, "D = 96"),
])
def test_elsewhere_is_fast(head_dim, dtype, cc, on_gpu, word):
    c = ad.choose(head_dim, dtype, cc, on_gpu)
    assert (c.kernel, c.function) == ad.FAST
    assert word in c.why, c.why


def test_gluon_dims_are_the_kernels():
    assert set(ad.GLUON_HEAD_DIMS) <= set(ag.HEAD_DIMS) and set(ad.GLUON_DTYPES) <= set(ag.DTYPES)


def test_cpu_path_runs_attn_fwd_fast():
    """Interpreter mode: choose_for says attn_fwd_fast and attention_default computes attention (ragged N, causal)."""
    dev = torch_device()
    gen = torch.Generator().manual_seed(torch.seed() % 2**31)  # fresh inputs each run
    if str(dev) != "cpu":
        pytest.skip("the CPU path is checked in interpreter mode")
    q, k, v = (torch.randn(1, 2, 37, 16, generator=gen).to(dev, F16) for _ in range(3))
    assert ad.choose_for(q).kernel == "attn_fwd_fast"
    out = torch.full_like(q, float("nan"))
    got = ad.attention_default(q, k, v, causal=True, out=out)
    assert got is out
    torch.testing.assert_close(out.float(), attention_ref(q.float(), k.float(), v.float(), causal=True),
                               **TOLERANCES[F16])


def test_gluon_branch_reaches_its_wrapper(monkeypatch):
    """With a faked Hopper choice the default calls attention_gluon, whose refusal of CPU tensors names the problem."""
    monkeypatch.setattr(ad, "choose_for", lambda q: ad.Choice(*ad.GLUON, "faked"))
    q = torch.randn(1, 1, 8, 128, dtype=F16)
    with pytest.raises(ag.GluonUnavailableError, match="expected a CUDA tensor on a Hopper GPU"):
        ad.attention_default(q, q, q)


@pytest.mark.parametrize("args,err,match", [
    ((0, F16, (9, 0)), ValueError, "head_dim is 0, expected a positive int"),
    ((True, F16, (9, 0)), ValueError, "head_dim is True"),
    ((128, "fp16", (9, 0)), TypeError, "dtype is 'fp16'"),
    ((128, F16, "hopper"), Exception, "compute capability 'hopper'"),
])
def test_bad_input_named(args, err, match):
    with pytest.raises(err, match=match):
        ad.choose(*args)


def test_choose_for_rank():
    with pytest.raises(ValueError, match=r"q is \(2, 3\), expected a rank-4"):
        ad.choose_for(torch.zeros(2, 3))


def test_kernel_line_says_which():
    d64 = ad.kernel_line((4, 16, 4096, 64), F16, "9.0", "attn_fwd_fast")
    assert "runs attn_fwd_fast there, the kernel profiled here" in d64 and "sm_90" in d64
    assert ad.kernel_line((4, 16, 4096, 64), "fp16", (9, 0), "attn_fwd_fast") == d64  # a run label's dtype name
    with pytest.raises(ValueError, match="dtype 'half4'"):
        ad.kernel_line((4, 16, 4096, 64), "half4", 90, "attn_fwd_fast")
    d128 = ad.kernel_line((4, 16, 4096, 128), F16, 90, "attn_fwd_fast")
    assert "runs attn_fwd_gluon there, not the kernel profiled here (attn_fwd_fast)" in d128
