"""The accelerator code paths (one large block per pass, no output arrays to fill, the fused
finish) run on a GPU only; here they run on CPU PyTorch with the accelerator block budgets, and
must agree with NumPy, non-positive rows counted alike."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
from rfkit import _backend as B

torch = pytest.importorskip("torch")


@pytest.fixture
def accelerator_layout(monkeypatch):
    monkeypatch.setattr(B.Backend, "block_elems", property(lambda self: B._BLOCK_ELEMS["cupy"]))
    monkeypatch.setattr(
        B.Backend, "row_block_elems", property(lambda self: B._ROW_BLOCK_ELEMS["accelerator"])
    )
    monkeypatch.setattr(B.Backend, "uses_thread_pool", property(lambda self: self.name == "numpy"))


def _qkv(seed, shape=(2, 3, 40, 8)):
    rng = np.random.default_rng(seed)
    Q = 0.4 * rng.standard_normal(shape)
    K = 0.4 * rng.standard_normal(shape)
    V = rng.standard_normal(shape)
    return Q, K, V


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "fm", [rk.features.Positive(16, projection="orthogonal"), rk.features.Trig(6), rk.features.OPRF(8, A=0.1)]
)
def test_accelerator_layout_equals_numpy(accelerator_layout, fm, causal):
    Q, K, V = _qkv(3)
    mask = np.zeros(Q.shape[:-1], dtype=bool)
    mask[..., -3:] = True  # padded keys
    est = rk.attention.RFA(fm, causal=causal)
    draw = fm.sample(8, rng=5)
    kw = {} if causal else {"key_padding_mask": mask}
    ref = est(Q, K, V, draw=draw, **kw)
    t = est(
        *(torch.as_tensor(a) for a in (Q, K, V)), draw=draw, **{k: torch.as_tensor(v) for k, v in kw.items()}
    )
    np.testing.assert_allclose(t.output.numpy(), ref.output, rtol=1e-10, atol=1e-12, equal_nan=True)
    assert t.n_nonpositive == ref.n_nonpositive


def test_accelerator_finish_counts_nonpositive_rows(accelerator_layout):
    from rfkit.attention._common import finish_ratio

    den = np.array([[1.0, 0.0, -2.0, np.nan, np.inf, 3.0]])
    num = np.ones((1, 6, 2))
    out, bad = finish_ratio(np.zeros_like(den), torch.as_tensor(num), torch.as_tensor(den))
    ref, ref_bad = finish_ratio(np.zeros_like(den), num, den)
    assert bad == ref_bad == 4
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(ref))
