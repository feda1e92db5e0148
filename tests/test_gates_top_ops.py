"""measure.top_ops: each kernel charged once to its innermost op (a synthetic trace with known
answers and a real recorded GPU trace), kernel families by name, and a live CPU-only trace."""
from __future__ import annotations

import pytest

from infralens_lab import evidence
from infralens_lab.measure.top_ops import innermost_ops, kernel_families, kernel_family
from infralens_lab.parse.trace import Trace, load_trace

T0 = 1_000_000.0


def X(name, cat, start, end, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + start, "dur": end - start,
            "args": args}


def conv_trace() -> Trace:
    """conv2d > convolution > cudnn_convolution launches two kernels (a layout transform of 10 µs and
    a convolution of 100 µs); a later aten::add launches one elementwise kernel of 5 µs."""
    cpu = [X("aten::conv2d", "cpu_op", 0, 100), X("aten::convolution", "cpu_op", 5, 95),
           X("aten::cudnn_convolution", "cpu_op", 10, 90),
           X("cudaLaunchKernel", "cuda_runtime", 20, 25, correlation=1),
           X("cudaLaunchKernel", "cuda_runtime", 40, 45, correlation=2),
           X("aten::add", "cpu_op", 120, 140), X("cudaLaunchKernel", "cuda_runtime", 125, 130, correlation=3)]
    gpu = [X("nchwToNhwcKernel", "kernel", 30, 40, tid=7, pid=0, correlation=1),
           X("sm90_xmma_fprop_implicit_gemm_bf16", "kernel", 50, 150, tid=7, pid=0, correlation=2),
           X("vectorized_elementwise_kernel<add>", "kernel", 150, 155, tid=7, pid=0, correlation=3)]
    return Trace({"traceEvents": cpu + gpu})


def test_innermost_ops_charge_each_kernel_once():
    tr = conv_trace()
    inclusive = tr.ops().set_index("name")["device_us"]
    assert inclusive["aten::conv2d"] == inclusive["aten::convolution"] == 110  # the wrappers count it all again
    leaf = innermost_ops(tr).set_index("op")
    assert list(leaf.index) == ["aten::cudnn_convolution", "aten::add"]
    assert leaf.loc["aten::cudnn_convolution", "kernels"] == 2
    assert leaf.loc["aten::cudnn_convolution", "device_us"] == 110
    assert leaf["pct"].sum() == pytest.approx(100)


def test_families():
    fam = kernel_families(conv_trace()).set_index("family")
    assert fam.loc["convolution", "total_us"] == 100 and fam.loc["layout transform", "total_us"] == 10
    assert kernel_family("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn") == "gemm"
    assert kernel_family("void at::native::(anonymous namespace)::batch_norm_transform_input_kernel") == "batch norm"
    assert kernel_family("something_new") == "other"
    with pytest.raises(TypeError, match="expected a str"):
        kernel_family(3)


def test_recorded_gpu_trace_every_kernel_charged_once():
    st = evidence.reference()
    tr = load_trace(st.load("trace_fixed"))
    leaf = innermost_ops(tr)
    charged = sum(1 for g, rt in tr.launcher.items() if tr.events.at[g, "cat"] == "kernel"
                  and any(tr.events.at[i, "cat"] == "cpu_op" for i in tr.enclosing.get(rt, [])))
    assert leaf["kernels"].sum() == charged > 0
    # no op is charged more device time than all kernels together
    assert leaf["device_us"].sum() <= tr.kernels()["total_us"].sum() + 1e-6


def test_cpu_only_trace_has_a_note():
    tr = Trace({"traceEvents": [X("aten::add", "cpu_op", 0, 10)]})
    out = innermost_ops(tr)
    assert out.empty and "self_cpu_us" in out.attrs["note"]
    assert kernel_families(tr).empty


def test_self_and_inclusive_times_by_hand():
    """conv_trace's ops (no ProfilerStep: one forward): conv2d keeps 10 of its 100 µs, convolution 10 of 90,
    cudnn_convolution 70 of 80 (two 5 µs launch calls inside), add 15 of 20."""
    from infralens_lab.measure.top_ops import op_calls, op_times

    c = op_calls(conv_trace()).set_index("name")
    assert c.loc["aten::cudnn_convolution", "dur_us"] == 80 and c.loc["aten::cudnn_convolution", "children_us"] == 10
    t = op_times(conv_trace()).set_index("name")
    assert t.loc["aten::cudnn_convolution", "self_ms"] == pytest.approx(0.07) and t.loc["aten::cudnn_convolution", "rank_self"] == 1
    assert t.loc["aten::conv2d", "rank_inclusive"] == 1 and t.loc["aten::conv2d", "self_ms"] == pytest.approx(0.01)
    assert t.loc["aten::add", "self_ms"] == pytest.approx(0.015) and t.loc["aten::add", "rank_self"] == 2


def test_outermost_ops_and_forward_busy_by_hand():
    from infralens_lab.measure.top_ops import family_us, forward_busy, gpu_work_samples, outermost_ops

    tr = Trace({"traceEvents": [X("ProfilerStep#0", "user_annotation", 0, 200)] + conv_trace().data["traceEvents"]})
    o = outermost_ops(tr).set_index("op")
    assert list(o.index) == ["aten::conv2d", "aten::add"]  # the ops the Python called, not what runs inside them
    assert o.loc["aten::conv2d", "cpu_ms"] == pytest.approx(0.1) and o.loc["aten::conv2d", "pct"] == pytest.approx(50.0)
    b = forward_busy(tr, forward_ms=0.5)
    # kernels 30-40, 50-150, 150-155: 115 µs of a forward from its CPU start (0) to its last kernel's end (155)
    assert b["kernels"] == 3 and b["kernel_ms"] == pytest.approx(0.115) and b["profiled_ms"] == pytest.approx(0.155)
    assert b["busy_pct"] == pytest.approx(100 * 115 / 155) and b["busy_pct_unprofiled"] == pytest.approx(23.0)
    assert sum(family_us(tr).values()) == pytest.approx(115.0)  # the same three kernels, by family, per forward
    assert gpu_work_samples(tr) == pytest.approx([115.0])  # one profiled forward: one sample
