"""The models' weight products where BLAS is held at one thread: fixed blocks on rfkit's thread pool.

A forward pass of the pretrained models is mostly products ``rows @ W`` of token rows with a weight
matrix (SmolLM2: 32 rows x 576 x 1536 and back, and 576 x 49,152 for the logits, in drop-in's
quick cells). Inside a study's work unit BLAS is held at one thread (:func:`rfkit._parallel.blas_limited`:
a multithreaded BLAS need not give the same bits at every thread count, MKL does not by default),
which left a core idle. There the products run the way rfkit's estimators do
(:mod:`rfkit._parallel`): fixed blocks whose size depends only on the sizes (the rows of a tall
product, in blocks of :data:`ROW_BLOCK` rows; else the columns of ``W``), each block one product at
one BLAS thread, spread over rfkit's threads (:func:`rfkit.threads`). Every output element is one
block's product, computed the same way whichever thread runs it and however many there are, so
the numbers are the same at every thread count and every number of study workers. Outside a work
unit, BLAS computes the whole product with its own threads (faster there: MiniLM's
extraction of 16 x 64 tokens took 0.41 s with BLAS's threads and 0.45 s in row blocks). With
OpenBLAS a block of the models' shapes gives the very bits of the whole product (tested), so a
model gives the same numbers inside and outside a study.
"""

from __future__ import annotations

import numpy as np

from .._parallel import blas_held, resolve_threads, run_blocks

__all__ = ["matmul", "BLOCK_OUTPUT", "ROW_BLOCK"]

#: output elements per column block (its width is a multiple of 64 columns, at least 64)
BLOCK_OUTPUT = 1 << 13
#: rows per block of a product with more rows than this (MiniLM's extraction: 16 texts x 64 tokens):
#: narrow column blocks of such a product are slow (1024 x 384 x 1152 float64, 2 threads, one-off:
#: 64-column blocks 9.4 ms, 256-row blocks 6.3 ms, BLAS's own threads 5.6 ms)
ROW_BLOCK = 256


def _width(m: int, n: int) -> int:
    """Columns per block for an (m, n) output, from the sizes only."""
    per = -(-BLOCK_OUTPUT // max(m, 1))
    return max(64, -(-per // 64) * 64)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for ``a`` (..., k) and a 2-d ``b`` (k, n); where BLAS is held at one thread, in fixed
    blocks on rfkit's threads.

    The result has ``a``'s leading shape; NumPy's type promotion applies. Outside a work unit, and
    for a product of one column block, BLAS computes it whole.
    """
    lead = a.shape[:-1]
    a2 = a.reshape(-1, a.shape[-1])
    m, n = a2.shape[0], b.shape[1]
    if not blas_held():  # BLAS's own threads
        return (a2 @ b).reshape(*lead, n)
    whole = slice(None)
    if m > ROW_BLOCK:  # tall: blocks of whole rows
        blocks = [(slice(i, i + ROW_BLOCK), whole) for i in range(0, m, ROW_BLOCK)]
    else:
        w = _width(m, n)
        if n <= w:
            return (a2 @ b).reshape(*lead, n)
        blocks = [(whole, slice(j, j + w)) for j in range(0, n, w)]
    out = np.empty((m, n), dtype=np.result_type(a2, b))

    def block(rc: tuple[slice, slice]) -> None:
        r, c = rc
        np.matmul(a2[r], b[:, c], out=out[r, c])

    run_blocks(block, blocks, resolve_threads(None, "rfkit.data model forward"))
    return out.reshape(*lead, n)
