"""PyTorch modules around rfkit's attention estimators, with the conventions of PyTorch's SDPA.

:class:`Attention` wraps any attention estimator of rfkit (exact :func:`rfkit.attention.softmax`,
:class:`~rfkit.attention.RFA`, :class:`~rfkit.attention.RA`, :class:`~rfkit.attention.SNIS`,
:class:`~rfkit.attention.LARA`, :class:`~rfkit.attention.Hybrid`, or one of your own with the call
``(Q, K, V, *, rng, n_draws)``) as an ``nn.Module`` whose ``forward(q, k, v, attn_mask=None,
is_causal=False)`` follows :func:`torch.nn.functional.scaled_dot_product_attention`: the scale
``1/sqrt(E)`` by default (folded into ``q``, since rfkit's core kernel is ``exp(q.k)`` with no
hidden ``1/sqrt(d)``), boolean masks with True = take part, additive float masks. The seed of the
random features and the redraw counter are buffers, so the state dict reproduces the outputs.
:class:`SelfAttention` projects ``q``, ``k``, ``v`` from one tensor, for ``nn.Sequential``.

This module needs PyTorch (``pip install "rfkit[torch]"``); ``import rfkit`` never imports it,
and importing :mod:`rfkit.nn` without it raises :class:`~rfkit.exceptions.BackendNotInstalledError`.
"""

from __future__ import annotations

from ..exceptions import BackendNotInstalledError

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised in a subprocess without torch
    raise BackendNotInstalledError(
        'rfkit.nn needs PyTorch, which is not installed: pip install "rfkit[torch]" (or pip install torch).'
    ) from None

from ._attention import Attention
from ._self_attention import SelfAttention

__all__ = ["Attention", "SelfAttention"]
