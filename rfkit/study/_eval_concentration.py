"""Concentration designs: the chi-squared concentration bound of Blackwelder (2024), Thm 3.3, in simulation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .. import data as rkdata
from .. import theory
from ..exceptions import InvalidParameterError
from ._estimators import build_feature_map
from ._messages import CellTables, PartTables
from ._metric_sources import metric_values, trial_metrics
from ._units import WorkUnit

__all__ = ["concentration_partial", "concentration_finalize", "TRIAL_COLUMNS"]

#: the columns of a concentration trial table, in the order saved tables have them (rfkit's
#: metric columns among them; a metric of your own follows)
TRIAL_COLUMNS = (
    "cell",
    "estimator",
    "trial",
    "status",
    "rms_max",
    "bound",
    "covered",
    "rms_over_bound",
    "realized_max",
    "realized_exceeds",
    "r",
)


def concentration_partial(unit: WorkUnit, setup: None = None) -> PartTables:
    r"""Blackwelder (2024), Thm 3.3, in simulation: does the chi-squared bound hold with probability p?

    Each trial draws a fresh data set (``n_pairs = s`` queries and ``s`` keys from the design's
    Gaussians) from its own stream, computes the exact max over all (i, j) of the relative RMS
    error :math:`\sqrt{\mathrm{MSE}}/\mathrm{SM}` (rk.theory, closed form) and compares it with
    the bound :math:`W(r)/\sqrt{2m}` (rk.theory.bounds.chi2_concentration); it also draws one
    feature set and records whether the *realised* max relative error exceeds the bound (the
    theorem does not cover realised errors; docs page *Theory*, section 4). Each metric's record
    computes its column from ``rms_max``, ``realized_max`` and ``bound`` (``compute``). Returns
    the chunk's trial rows.
    """
    design, cell, cell_index = unit.design, unit.cell, unit.cell_index
    p = float(cell["p"] if "p" in cell else design.data["p"])
    params = design.data_params(cell)
    params.pop("source")
    params.pop("dataset", None)
    s_pts = int(params.pop("n_pairs", 16))
    dim = int(params.pop("dim"))
    sq, sk = params.pop("scale_q", 1.0), params.pop("scale_k", 1.0)
    trials = unit.trials
    streams = unit.streams()
    rows = []
    metrics = trial_metrics("concentration", design.metrics, TRIAL_COLUMNS)
    for est in design.estimators:
        label = design.label(est)
        fm = build_feature_map(est["map"], design.estimator_params(est, cell))
        if fm.needs_data:
            raise InvalidParameterError(
                f"{label!r}: the concentration theorem needs a fixed A (not a rule fitted to the data)."
            )
        A_spec: Any = getattr(fm, "A", None)
        A = np.asarray(A_spec, dtype=np.float64) if not isinstance(A_spec, (str, type(None))) else np.eye(dim)
        if A.ndim == 1:
            A = np.diag(A)
        ref = rkdata.gaussian_qk(1, dim, rng=0, **params)
        bound = theory.bounds.chi2_concentration(
            ref.mean_q * sq,
            ref.cov_q * sq * sq,
            ref.mean_k * sk,
            ref.cov_k * sk * sk,
            A,
            s_pts,
            p,
            int(getattr(fm, "n_features")),  # noqa: B009 - FeatureMap has no n_features in general
        )
        rms_maxs, realized_maxs = np.empty(len(trials)), np.empty(len(trials))
        for j in range(len(trials)):
            gen = np.random.default_rng(streams[j])
            data = rkdata.gaussian_qk(s_pts, dim, rng=gen, **params)
            X, Y = sq * data.q, sk * data.k
            rel = np.sqrt(theory.relative_mse(fm, X[:, None, :], Y[None, :, :]))
            draw = fm.sample(dim, rng=gen)
            ratio = np.exp(draw.log_kernel(X, Y) - X @ Y.T)
            realized_maxs[j] = float(np.max(np.abs(ratio - 1.0)))
            rms_maxs[j] = float(np.max(rel))
        columns = {  # each metric's record computes its column
            m.column: metric_values(
                m,
                len(trials),
                rms_max=rms_maxs,
                realized_max=realized_maxs,
                bound=np.full(len(trials), bound.bound),
            )
            for m in metrics
        }
        for j, t in enumerate(trials):
            row = {
                "cell": cell_index,
                "estimator": label,
                "trial": t,
                "status": "ok",
                "rms_max": float(rms_maxs[j]),
                "bound": bound.bound,
                "realized_max": float(realized_maxs[j]),
                "r": bound.r,
                **{c: v[j].item() for c, v in columns.items()},
            }
            rows.append({c: row.pop(c) for c in TRIAL_COLUMNS if c in row} | row)
    return {"trials": pd.DataFrame(rows)}


def concentration_finalize(unit: WorkUnit, setup: None, parts: list[PartTables]) -> CellTables:
    """Trial rows of all chunks, ordered by (estimator, trial); pairs: the bound per estimator."""
    design = unit.design
    trials = pd.concat([p["trials"] for p in parts], ignore_index=True)
    if len(parts) > 1:
        order = {label: i for i, label in enumerate(design.labels)}
        key = trials["estimator"].map(order).to_numpy() * design.trials + trials["trial"].to_numpy()
        trials = trials.iloc[np.argsort(key, kind="stable")].reset_index(drop=True)
    pairs = trials.groupby(["cell", "estimator"], sort=False)[["bound", "r"]].first().reset_index()
    return CellTables(trials=trials, pairs=pairs)
