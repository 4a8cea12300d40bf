"""Studies on an array backend: `backend`/`device` in designs, `--backend` on the
command line, tables equal to NumPy's within round-off, provenance, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
from rfkit.exceptions import BackendNotInstalledError, InvalidParameterError, StudyError

pytest.importorskip("array_api_strict", reason="array-api-strict is a dev dependency of rfkit")

try:
    import torch
except ImportError:  # pragma: no cover - optional
    torch = None

KERNEL = dict(
    name="backend-kernel",
    kind="kernel",
    trials=40,
    chunk_trials=20,
    seed=20261123,
    data={"source": "pairs", "n_pairs": 6, "norm_x": 0.6, "norm_y": 0.5},
    grid={"dim": [4], "n_features": [8, 12]},
    estimators=[
        {"label": "positive-orthogonal", "map": "Positive", "projection": "orthogonal"},
        {"label": "trig", "map": "Trig"},
        {"label": "oprf", "map": "OPRF"},
        {"label": "hcexp-mean", "map": "HCEXP", "A": "mean"},
    ],
)
ATTENTION = dict(
    name="backend-attention",
    kind="attention",
    trials=6,
    chunk_trials=3,
    seed=7,
    data={"source": "sequence", "n_tokens": 24, "dim": 4, "d_v": 3, "scale": 0.5},
    grid={"samples": [8]},
    estimators=[
        {"label": "rfa", "estimator": "RFA", "map": "Positive"},
        {"label": "rfa-causal", "estimator": "RFA", "map": "Positive", "causal": True},
        {"label": "snis", "estimator": "SNIS", "proposal": "chunk-mean"},
        {"label": "lara", "estimator": "LARA", "weights": "balance"},
        {"label": "ra", "estimator": "RA"},
    ],
)

BACKENDS = [
    pytest.param(("array_api_strict", None), id="array_api_strict"),
    pytest.param(
        ("torch", "cpu"),
        id="torch",
        marks=pytest.mark.skipif(torch is None, reason="PyTorch is not installed"),
    ),
    pytest.param(
        ("torch", "cuda"),
        id="torch-cuda",
        marks=pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


def _numeric(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.sort_values(["cell", "estimator", "metric"]).reset_index(drop=True)


@pytest.mark.parametrize("spec", [KERNEL, ATTENTION], ids=["kernel", "attention"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_tables_equal_numpy_within_round_off(spec, backend, tmp_path: Path):
    name, device = backend
    design = rk.study.Design(**spec)
    ref = rk.study.run(design, progress=False)
    res = rk.study.run(design, backend=name, device=device, out=tmp_path / "o", progress=False)
    a, b = _numeric(ref.summary()), _numeric(res.summary())
    assert a[["cell", "estimator", "metric", "n_trials", "n_failed"]].equals(
        b[["cell", "estimator", "metric", "n_trials", "n_failed"]]
    )
    for col in ("estimate", "mcse"):
        np.testing.assert_allclose(b[col].to_numpy(), a[col].to_numpy(), rtol=1e-9, atol=1e-12)
    prov = res.provenance
    assert prov["backend"] == name and prov["design_hash"] == ref.provenance["design_hash"]
    assert (device or "") in prov["device"] and prov["device_name"]
    assert name == "array_api_strict" or prov["versions"][name]
    saved = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert saved["backend"] == name


def test_backend_in_the_study_file_and_on_the_command_line(tmp_path: Path):
    from rfkit.cli import main

    toml = tmp_path / "s.toml"
    toml.write_text(
        'name = "b"\nkind = "kernel"\ntrials = 10\nseed = 3\nbackend = "array_api_strict"\n'
        '[data]\nsource = "pairs"\nn_pairs = 4\n[grid]\ndim = [3]\nn_features = [4]\n'
        '[[estimators]]\nmap = "Positive"\n'
    )
    design = rk.study.load_design(toml)
    assert design.backend == "array_api_strict" and design.device is None
    assert design.hash() == design.on_backend("numpy").hash()  # the numbers do not depend on it
    assert main(["run", str(toml), "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["backend"] == "array_api_strict"
    assert main(["run", str(toml), "--out", str(tmp_path / "b"), "--backend", "numpy", "--no-progress"]) == 0
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["backend"] == "numpy"
    # resuming a folder with another backend would mix numbers: refused, naming both
    with pytest.raises(StudyError, match=r"backend numpy:default vs array_api_strict:default"):
        rk.study.run(toml, out=tmp_path / "b", resume=True, progress=False)


def test_bad_backends_named(tmp_path: Path):
    with pytest.raises(InvalidParameterError, match=r"`backend` must be one of .*Got 'jax' instead"):
        rk.study.Design(**{**KERNEL, "backend": "jax"})
    with pytest.raises(
        InvalidParameterError, match=r"`device` must be 'cpu' \(or absent\) for backend 'numpy'"
    ):
        rk.study.Design(**{**KERNEL, "device": "cuda"})
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendNotInstalledError, match=r"backend 'cupy' needs the package 'cupy'"):
            rk.study.run(rk.study.Design(**KERNEL), backend="cupy", progress=False)
