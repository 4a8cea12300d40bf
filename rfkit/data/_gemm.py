"""The models' weight products on rfkit's thread pool, in fixed blocks of output columns.

A forward pass of the pretrained models is mostly products ``rows @ W`` of a few dozen token rows
with a weight matrix (SmolLM2: 576 x 1536 and back, and 576 x 49,152 for the logits). rfkit runs
them the way it runs its own estimators (:mod:`rfkit._parallel`): the columns of ``W`` in fixed
blocks whose width depends only on the sizes, each block one product at one BLAS thread, the
blocks spread over rfkit's threads (:func:`rfkit.threads`). Every output element is one block's
product, computed the same way whichever thread runs it and however many there are, so a forward
pass gives the same numbers at every thread count and every number of study workers (a
multithreaded BLAS makes no such promise: MKL does not by default). With OpenBLAS a column block
gives the very bits of the whole product (checked for the models' shapes in the tests).
"""

from __future__ import annotations

import numpy as np

from .._parallel import resolve_threads, run_blocks

__all__ = ["matmul", "BLOCK_OUTPUT"]

#: output elements per block (its width is a multiple of 64 columns, at least 64)
BLOCK_OUTPUT = 1 << 13


def _width(m: int, n: int) -> int:
    """Columns per block for an (m, n) output, from the sizes only."""
    per = -(-BLOCK_OUTPUT // max(m, 1))
    return max(64, -(-per // 64) * 64)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for ``a`` (..., k) and a 2-d ``b`` (k, n), in fixed column blocks on rfkit's threads.

    The result has ``a``'s leading shape; NumPy's type promotion applies. One block (a small
    product) is computed directly.
    """
    lead = a.shape[:-1]
    a2 = a.reshape(-1, a.shape[-1])
    m, n = a2.shape[0], b.shape[1]
    w = _width(m, n)
    if n <= w:
        return (a2 @ b).reshape(*lead, n)
    out = np.empty((m, n), dtype=np.result_type(a2, b))

    def block(j0: int) -> None:
        j1 = min(j0 + w, n)
        np.matmul(a2, b[:, j0:j1], out=out[:, j0:j1])

    run_blocks(block, range(0, n, w), resolve_threads(None, "rfkit.data model forward"))
    return out.reshape(*lead, n)
