"""The models' weight products in fixed row or column blocks (rfkit.data._gemm): thread-count invariance."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import rfkit as rk
from rfkit._parallel import blas_limited
from rfkit.data import _gemm

# SmolLM2's products (32 token rows): q/k/v/o, gate/up, down, logits; MiniLM's fused qkv, and at
# the 16 x 64 tokens of its extraction (row blocks)
MODEL_SHAPES = [
    ((32, 576), (576, 576)),
    ((32, 576), (576, 1536)),
    ((32, 1536), (576, 1536)),  # down: b is a transposed view, (1536, 576)
    ((2, 16, 576), (576, 4000)),
    ((64, 384), (384, 1152)),
    ((1024, 384), (384, 1152)),
]
#: shapes whose blocks give the whole product's bits with OpenBLAS (checked below)
BITWISE_SHAPES = [
    *MODEL_SHAPES,
    ((5, 7), (7, 300)),
    ((3, 8), (8, 40)),  # one block: a direct product
]
SHAPES = [*BITWISE_SHAPES, ((600, 64), (64, 100))]  # row blocks, the last one short


def _operands(a_shape, b_shape, dtype, rng):
    a = rng.standard_normal(a_shape).astype(dtype)
    if a_shape[-1] != b_shape[0]:  # a transposed weight view, as the models keep them
        b = rng.standard_normal(b_shape).astype(dtype).T
    else:
        b = rng.standard_normal(b_shape).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
def test_blocked_product_is_the_same_for_every_thread_count(a_shape, b_shape, dtype):
    rng = np.random.default_rng(0)
    a, b = _operands(a_shape, b_shape, dtype, rng)
    results = []
    for n in (1, 2, 3):
        with rk.threads(n), blas_limited():  # as in a study's work unit: the blocked path
            results.append(_gemm.matmul(a, b))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    ref = a @ b
    assert results[0].shape == ref.shape and results[0].dtype == ref.dtype
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(results[0], ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_row_blocks_cover_every_row_once(monkeypatch):
    """Row blocks shorter than the product: every output row is written by exactly one block."""
    monkeypatch.setattr(_gemm, "ROW_BLOCK", 3)
    a = np.arange(2.0 * 11).reshape(11, 2)
    b = np.arange(1.0, 7.0).reshape(2, 3)
    with rk.threads(2), blas_limited():
        np.testing.assert_array_equal(_gemm.matmul(a, b), a @ b)


def test_blocks_cover_every_column_once(monkeypatch):
    """Column blocks narrower than the product: every output column is written by exactly one block."""
    monkeypatch.setattr(_gemm, "BLOCK_OUTPUT", 64)  # 64-column blocks for 1 row of output
    a = np.arange(1.0, 4.0)[None, :]
    b = np.arange(3.0 * 200).reshape(3, 200)
    with rk.threads(2), blas_limited():
        np.testing.assert_array_equal(_gemm.matmul(a, b), a @ b)


def test_openblas_blocks_give_the_whole_products_bits():
    """With OpenBLAS (NumPy's wheels) a block of these shapes gives the very bits of the whole
    product at one BLAS thread, so the models' outputs did not change when their products were
    blocked. (Not every shape: a short last row block may take another kernel.)"""
    if not any(i.get("internal_api") == "openblas" for i in threadpool_info()):
        pytest.xfail("another BLAS: the blocked products agree to round-off (checked above), not bit for bit")
    rng = np.random.default_rng(1)
    for a_shape, b_shape in BITWISE_SHAPES:
        for dtype in (np.float64, np.float32):
            a, b = _operands(a_shape, b_shape, dtype, rng)
            with threadpool_limits(1):
                whole = a @ b
            with blas_limited():
                np.testing.assert_array_equal(_gemm.matmul(a, b), whole)


def test_outside_a_work_unit_blas_computes_the_whole_product(monkeypatch):
    """Where BLAS is not held at one thread the product is BLAS's own (its threads): no blocks run."""
    monkeypatch.setattr(_gemm, "run_blocks", lambda *a, **k: pytest.fail("blocks ran outside a work unit"))
    rng = np.random.default_rng(2)
    a, b = _operands((1024, 384), (384, 1152), np.float64, rng)
    np.testing.assert_array_equal(_gemm.matmul(a, b), a @ b)
