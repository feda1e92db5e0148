"""Triton kernels, their launch wrappers and plain-torch references.

* :mod:`.intro` - ``vector_add`` (kernel ``add_kernel``), lab 00's first kernel.
* :mod:`.copies` - ``copy`` (kernel ``copy_coalesced``) and ``copy_strided`` (kernel
  ``copy_strided``), for ``STRIDES = (1, 2, 4, 8, 16, 32)``.
* :mod:`.attention` - ``attention_naive`` (kernels ``naive_qk``, ``naive_softmax``,
  ``naive_pv``), ``attention_tiled`` (teaching kernel ``attn_fwd``), ``attention_tiled_fast``
  (kernel ``attn_fwd_fast``, from :mod:`.attention_fast`) and ``VARIANTS``.
* :mod:`.attention_default` - ``attention_default``: the package's fast attention, ``attn_fwd_gluon``
  (:mod:`.attention_gluon`) on Hopper at D = 128, ``attn_fwd_fast`` elsewhere; ``choose`` says which and why.
* :mod:`.reference` - the torch references every test and lab compares against.

Kernels run on CUDA tensors in gpu mode and on CPU tensors in interpreter mode
(:func:`infralens_lab.device.torch_device`). Importing this package decides the mode first
(the parent package does not, to import without torch), so that ``TRITON_INTERPRET=1`` is set
before any ``@triton.jit`` below runs in interpreter mode.
"""
import contextlib

from .. import device

# A bad or impossible INFRALENS_MODE is tolerated here, as it was at the package's import: every launch
# wrapper asks for the mode (torch_device()) and raises the same clear error there.
with contextlib.suppress(device.ModeSettingError, device.GpuUnavailableError):
    device.mode()  # decide now, before any @triton.jit in this package runs
