"""The recorder's run configurations: one typed value per profiled run, written as a label and read back.

Every ncu run the recorder (or a lab, live) makes is one :class:`RunConfig`; its :meth:`RunConfig.label`
is the text after ``==INFRALENS== config:`` in the CSV files (see :func:`infralens_lab.measure.ncu.config_block`)
and :meth:`RunConfig.parse` reads it back. Labels look like ``copy n=16777216 fp32``,
``copy_strided stride=8 n=16777216 fp32``, ``tiled shape=1,8,2048,64 fp16`` (``causal`` appended when
causal), ``matmul size=1024,1024,1024 fp16`` and ``train_step fixed``. Element sizes in bytes: :data:`ELEM_BYTES`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..units import ELEM_BYTES

# the dtypes a run label may name (the recorder profiles these); bytes per element from units.ELEM_BYTES
LABEL_DTYPES = ("fp32", "float32", "fp16", "float16", "bf16", "bfloat16")

ATTENTION_KINDS = ("naive", "tiled", "tiled_fast")  # ncu_attention.csv's runs
GLUON_KINDS = ("gluon",)  # attn_fwd_gluon, Hopper only: ncu_gluon.csv's runs (beside tiled_fast)
ATTENTION_FAMILY = (*ATTENTION_KINDS, *GLUON_KINDS)  # every kind whose label is an attention shape
KINDS = ("copy", "copy_strided", *ATTENTION_FAMILY, "matmul", "train_step")
_FIELD = re.compile(r"(\w+)=([\w,.]+)")
_EXAMPLES = ("'copy n=16777216 fp32', 'copy_strided stride=8 n=16777216 fp32', 'naive shape=1,8,2048,64 fp16', "
             "'matmul size=1024,1024,1024 fp16' or 'train_step fixed'")


@dataclass(frozen=True)
class RunConfig:
    """One profiled run. ``kind``: one of :data:`KINDS`; ``n``: useful (output) elements of a copy;
    ``stride``: elements between reads of a strided copy; ``shape``: (B, H, N, D) of attention or
    (M, N, K) of a matmul; ``dtype``: ``fp32``/``fp16``/``bf16``; ``version``: the train-step pipeline."""

    kind: str
    dtype: str | None = None
    n: int | None = None
    stride: int | None = None
    shape: tuple[int, ...] | None = None
    causal: bool = False
    version: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"run kind {self.kind!r}; expected one of {KINDS}")
        if self.dtype is not None and self.dtype not in LABEL_DTYPES:
            raise ValueError(f"dtype {self.dtype!r}; expected one of {sorted(LABEL_DTYPES)}")

    @property
    def family(self) -> str:
        """``copy``, ``copy_strided``, ``attention``, ``matmul`` or ``train_step``."""
        return "attention" if self.kind in ATTENTION_FAMILY else self.kind

    @property
    def elem_bytes(self) -> int | None:
        return ELEM_BYTES.get(self.dtype) if self.dtype else None

    def label(self) -> str:
        """The label the CSV files carry (inverse of :meth:`parse`)."""
        if self.kind == "train_step":
            return f"train_step {self.version or 'fixed'}"
        words = [self.kind]
        if self.stride is not None:
            words.append(f"stride={self.stride}")
        if self.n is not None:
            words.append(f"n={self.n}")
        if self.shape is not None:
            words.append(("size=" if self.kind == "matmul" else "shape=") + ",".join(map(str, self.shape)))
        if self.dtype:
            words.append(self.dtype)
        if self.causal:
            words.append("causal")
        return " ".join(words)

    @classmethod
    def parse(cls, label: str) -> RunConfig:
        """Read a label back; ValueError naming the label and the forms it may take."""
        if not isinstance(label, str) or not label.split():
            raise ValueError(f"config label {label!r}; expected e.g. {_EXAMPLES}")
        words = label.split()
        kind, kw = words[0], {}
        if kind == "train_step":
            return cls(kind, version=words[1] if len(words) > 1 else None)
        if kind not in KINDS:
            raise ValueError(f"config label {label!r} is not one the recorder writes; expected e.g. {_EXAMPLES}")
        for w in words[1:]:
            m = _FIELD.fullmatch(w)
            if m and m.group(1) in ("shape", "size") and re.fullmatch(r"\d+(,\d+)*", m.group(2)):
                kw["shape"] = tuple(int(x) for x in m.group(2).split(","))
            elif m and m.group(1) in ("n", "stride") and m.group(2).isdigit():
                kw[m.group(1)] = int(m.group(2))
            elif w in LABEL_DTYPES:
                kw["dtype"] = w
            elif w == "causal":
                kw["causal"] = True
            else:
                raise ValueError(f"config label {label!r}: word {w!r} is not understood; expected e.g. {_EXAMPLES}")
        cfg = cls(kind, **kw)
        need = {"copy": ("n", "dtype"), "copy_strided": ("stride", "n", "dtype"), "matmul": ("shape", "dtype")}
        need.update({k: ("shape", "dtype") for k in ATTENTION_FAMILY})
        missing = [f for f in need[kind] if getattr(cfg, f) is None]
        size = {"matmul": 3, **{k: 4 for k in ATTENTION_FAMILY}}.get(kind)
        if missing or (size and len(cfg.shape) != size):
            raise ValueError(f"config label {label!r} lacks {missing or 'a shape of ' + str(size)}; "
                             f"expected e.g. {_EXAMPLES}")
        return cfg

    def fields(self) -> dict:
        """Flat dict for tables: ``family`` (the label's first word), the fields present, ``elem_bytes``;
        attention adds ``variant, B, H, N, D`` and a matmul ``M, N, K``."""
        d = {"family": self.family, "kind": self.kind, "dtype": self.dtype, "elem_bytes": self.elem_bytes,
             "causal": self.causal}
        for f in ("n", "stride", "shape", "version"):
            if getattr(self, f) is not None:
                d[f] = getattr(self, f)
        if self.family == "attention":
            d.update(variant=self.kind, **dict(zip("BHND", self.shape, strict=True)))
        elif self.kind == "matmul":
            d.update(dict(zip("MNK", self.shape, strict=True)))
        return d


def copy_run(n: int, dtype: str = "fp32", stride: int | None = None) -> RunConfig:
    """The run of the coalesced copy (``stride`` None) or a strided copy of ``n`` useful elements."""
    return RunConfig("copy" if stride is None else "copy_strided", dtype, n=n, stride=stride)


def target_args(cfg: RunConfig) -> list[str]:
    """The ``python -m infralens_lab target`` arguments (after ``--kernel``) that run ``cfg``."""
    if cfg.family in ("copy", "copy_strided"):
        return (["--stride", str(cfg.stride)] if cfg.stride is not None else []) + \
            ["--n", str(cfg.n), "--dtype", cfg.dtype]
    if cfg.family == "attention":
        return ["--shape", ",".join(map(str, cfg.shape)), "--dtype", cfg.dtype] + (["--causal"] if cfg.causal else [])
    if cfg.kind == "matmul":
        return ["--size", ",".join(map(str, cfg.shape)), "--dtype", cfg.dtype]
    return []
