"""The figures and the report section of a drop-in study (kind ``"drop-in"``), from its saved tables.

Figure kinds (``[outputs] figures``): ``dropin_damage_vs_budget`` (each damage measure against
the cost per query, a panel per context length: ``dropin_damage_vs_budget_kl``, ``..._top1_agree``
and so on; the old kind name ``dropin_kl_vs_budget`` is accepted with a deprecation warning),
``dropin_per_layer`` (each layer replaced alone: ``dropin_per_layer_damage``, the damage per layer,
and ``dropin_per_layer_head_mse``, each layer's per-head output MSE; where no cell replaces a layer
alone, as with a data source that runs its model whole, each cell's per-layer output MSE) and
``dropin_proxy`` (damage against the per-head output MSE, with the rank correlation). The section
(``[outputs] tables = ["dropin"]``) has the damage tables and the correlation, and writes them as CSV.
A model a data source brought (``source = "transformers"``) is named by its ``data.model`` in the
figures and tables, never by a built-in model's name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..plots import (
    DAMAGE_LABELS,
    add_caption,
    figure_names,
    plot_damage_vs_budget,
    plot_layer_damage,
    plot_proxy_vs_damage,
)
from ..study.outputs import atomic_csv
from ..study.summaries import dropin_points, proxy_correlation
from ..tables import format_mcse, md_escape, to_markdown
from ._captions import caption

__all__ = ["DROPIN_FIGURES", "dropin_figure_plan", "dropin_section", "DROPIN_CSV"]

#: the figure kinds of a drop-in study
DROPIN_FIGURES = ("dropin_damage_vs_budget", "dropin_per_layer", "dropin_proxy")
#: the CSV tables the section writes (recorded in the manifest)
DROPIN_CSV = ("dropin_damage.csv", "dropin_points.csv", "proxy_correlation.csv")
_BUDGET_METRICS = ("kl", "top1_agree", "ppl_ratio", "emb_cos", "hidden_cos")
_LAYER_PANELS = [("smollm2", "kl"), ("minilm", "emb_cos")]
_PROXY_PANELS = [("smollm2", "head_mse"), ("minilm", "head_mse")]

Plan = list[tuple[str, Callable[[str | None], Any]]]


def _sourced(design: Any) -> tuple[str, str, str] | None:
    """``(key, name, role)`` of the model a data source brought: its key in the pairs table (the
    source), its name (``data.model``) and ``"decoder"``/``"encoder"`` where ``data.causal`` says;
    None for the built-in models (source ``"passages"``)."""
    data = dict(design.data)
    source = str(data.get("source", "passages"))
    if source == "passages":
        return None
    causal = data.get("causal")
    return (
        source,
        str(data.get("model", source)),
        "" if causal is None else ("decoder" if causal else "encoder"),
    )


def _named_points(frame: pd.DataFrame, design: Any) -> tuple[pd.DataFrame, dict[str, str]]:
    """Proxy points or correlations with a source's model under its own name (their ``model`` is the
    family whose measures it gives), and the proxy figure's panel titles for it."""
    src = _sourced(design)
    if src is None or frame.empty or "model" not in frame.columns:
        return frame, {}
    _, name, _ = src
    damage = "KL" if frame["model"].iloc[0] == "smollm2" else "1 − cos"
    return frame.assign(model=name), {name: f"{name}, {damage}"}


def _one_layer_cells(pairs: pd.DataFrame) -> list[int]:
    """Cells whose per-layer table has the damage of each layer replaced alone."""
    cols = [c for c in ("kl", "emb_cos") if c in pairs.columns]
    has = pairs[cols].notna().any(axis=1) if cols else pd.Series(False, index=pairs.index)
    return sorted(int(c) for c in pairs.loc[has, "cell"].unique())


def dropin_figure_plan(kind: str, design: Any, summary: pd.DataFrame, table: Callable[[str], Any]) -> Plan:
    """``(name, draw)`` pairs of one drop-in figure kind (none for other designs or kinds)."""
    if design.kind != "drop-in":
        return []
    grid_cols = list(design.grid)
    plan: Plan = []
    names = dict(zip(design.labels, figure_names(design.estimators)))  # references marked

    def shown(frame: pd.DataFrame) -> pd.DataFrame:  # the legends of every figure: display names
        return frame.assign(estimator=frame["estimator"].map(lambda lab: names.get(lab, lab)))

    if kind == "dropin_damage_vs_budget":
        for metric in _BUDGET_METRICS:
            rows = summary[summary["metric"] == metric]
            if rows.empty:
                continue

            def draw_budget(
                size: str | None, metric: str = metric, rows: pd.DataFrame = rows, *, ax: Any = None
            ) -> Any:
                axes = plot_damage_vs_budget(rows, metric, ax=ax, size=size)
                if ax is None:  # given axes: the caller's figure, no caption
                    add_caption(axes[0].figure, caption(design, rows, ("feature_dim", "n_tokens")))
                return axes[0].figure

            plan.append((f"{kind}_{metric}", draw_budget))
    elif kind == "dropin_per_layer":
        pairs = table("pairs")
        if pairs is None or "layer" not in pairs.columns:
            return []
        src = _sourced(design)
        titles = {} if src is None else {src[0]: f"{src[1]} ({src[2]})" if src[2] else src[1]}
        extra = [m for m in dict.fromkeys(pairs["model"]) if m not in dict(_LAYER_PANELS)]  # a source's
        damage = _LAYER_PANELS + [(m, c) for m in extra for c in ("kl", "emb_cos")]
        proxy = _PROXY_PANELS + [(m, "head_mse") for m in extra]
        one = _one_layer_cells(pairs)
        figures = (("damage", damage), ("head_mse", proxy)) if one else (("head_mse", proxy),)
        with_mse = pairs.loc[pairs["head_mse"].notna(), "cell"] if "head_mse" in pairs.columns else []
        for cell in one or sorted(int(c) for c in pd.unique(with_mse)):  # none alone: every cell's MSE
            rows = shown(pairs[pairs["cell"] == cell])
            suffix = "".join(f"_{a}-{rows[a].iloc[0]}" for a in grid_cols if a in rows.columns)
            for name, panels in figures:

                def draw_layers(
                    size: str | None, rows: pd.DataFrame = rows, panels: Any = panels, *, ax: Any = None
                ) -> Any:
                    axes = plot_layer_damage(rows, panels, ax=ax, size=size, titles=titles)
                    if ax is None:
                        add_caption(axes[0].figure, caption(design, rows, ("layer",)))
                    return axes[0].figure

                plan.append((f"{kind}_{name}{suffix}", draw_layers))
    elif kind == "dropin_proxy":
        trials = table("trials")
        if trials is None:
            return []
        points = dropin_points(trials, grid_cols)
        if points.empty:
            return []
        corr, _ = _named_points(proxy_correlation(trials, grid_cols), design)
        points, titles = _named_points(shown(points), design)

        def draw_proxy(size: str | None, *, ax: Any = None) -> Any:
            axes = plot_proxy_vs_damage(points, corr, ax=ax, size=size, titles=titles)
            if ax is None:
                add_caption(axes[0].figure, caption(design, None, ("feature_dim", "n_tokens")))
            return axes[0].figure

        plan.append((kind, draw_proxy))
    return plan


def _damage_table(summary: pd.DataFrame, metric: str, setting: list[str]) -> pd.DataFrame:
    """Estimators x budgets of one measure (estimate ± MCSE, as damage), one column block per setting."""
    s = summary[summary["metric"] == metric].copy()
    cos = metric.endswith("_cos")
    if cos:
        s["estimate"] = 1.0 - s["estimate"]
    s["value"] = [format_mcse(e, m) for e, m in zip(s["estimate"], s["mcse"])]
    s["column"] = [
        ", ".join(
            [f"{r[c]} tokens" if c == "n_tokens" else f"{c}={r[c]}" for c in setting]
            + [f"D={r['feature_dim']}"]
        )
        for _, r in s.iterrows()
    ]
    t = s.pivot_table(index="estimator", columns="column", values="value", aggfunc="first", sort=False)
    return t.reset_index()


def dropin_section(summary: pd.DataFrame, design: Any, out: Path) -> list[str]:
    """Markdown lines of the drop-in section, from the tables saved in ``out``; writes
    ``dropin_damage.csv``, ``dropin_points.csv`` and ``proxy_correlation.csv`` beside the report."""

    def table(name: str) -> pd.DataFrame | None:
        path = out / f"{name}.parquet"
        return pd.read_parquet(path) if path.exists() else None

    grid_cols = list(design.grid)
    setting = [c for c in grid_cols if c != "feature_dim"]
    lines = [
        "## Damage to the models' outputs",
        "",
        "Each estimator in every replaced layer, against the exact model on the same texts; mean over draws "
        "± MCSE; D is the cost per query (feature columns for RFA, samples for SNIS and LARA, exact keys + "
        "feature columns for Hybrid). Cosines are shown as the damage 1 − cosine.",
        "",
    ]
    frames = []
    for metric in _BUDGET_METRICS:
        if summary[summary["metric"] == metric].empty:
            continue
        t = _damage_table(summary, metric, setting)
        lines += [f"### {md_escape(DAMAGE_LABELS.get(metric, metric))}", "", to_markdown(t).rstrip("\n"), ""]
        frames.append(t.assign(measure=metric))
    if frames:
        atomic_csv(pd.concat(frames, ignore_index=True), out / "dropin_damage.csv")
    trials = table("trials")
    if trials is None:
        return lines
    points, _ = _named_points(dropin_points(trials, grid_cols), design)
    corr, _ = _named_points(proxy_correlation(trials, grid_cols), design)
    if not points.empty:
        atomic_csv(points, out / "dropin_points.csv")
    if not corr.empty:
        atomic_csv(corr, out / "proxy_correlation.csv")
        show = corr.assign(
            rho=[f"{v:+.2f}" for v in corr["rho"]],
            interval=[f"[{a:+.2f}, {b:+.2f}]" for a, b in zip(corr["ci_low"], corr["ci_high"])],
            p_value=[f"{v:.2g}" for v in corr["p_value"]],
        )
        cols = [
            *[c for c in setting if c in show.columns],
            "model",
            "proxy",
            "damage",
            "n_points",
            "rho",
            "interval",
            "p_value",
        ]
        lines += [
            "## Does the per-head output MSE predict the damage?",
            "",
            "Across the (estimator, budget) points of each setting: Spearman's rank correlation between each "
            "estimator's per-head attention-output MSE on the exact model's q, k, v (the measure of the "
            "real-attention study, same random numbers) and its end-to-end damage; 95% bootstrap interval "
            "(draws resampled within each point) and permutation p-value. Points: `dropin_points.csv`.",
            "",
            to_markdown(show[cols]).rstrip("\n"),
            "",
        ]
    pairs = table("pairs")
    if pairs is not None and "layer" in pairs.columns:
        lines += _layer_lines(pairs)
    return lines


def _layer_lines(pairs: pd.DataFrame) -> list[str]:
    """Per one-layer cell and model: each estimator's most damaging layer and the spread over layers."""
    out: list[str] = []
    for cell in _one_layer_cells(pairs):
        rows = pairs[pairs["cell"] == cell]
        table = []
        for model, column in _LAYER_PANELS:
            for est, g in rows[rows["model"] == model].groupby("estimator", sort=False):
                d = (1.0 - g[column]) if column.endswith("_cos") else g[column]
                d = d.to_numpy(dtype=float)
                if not np.isfinite(d).any():
                    continue
                k = int(np.nanargmax(d))
                table.append(
                    {
                        "model": model,
                        "estimator": est,
                        "damage": DAMAGE_LABELS[column],
                        "worst layer": int(g["layer"].iloc[k]),
                        "its damage": f"{d[k]:.3g}",
                        "median over layers": f"{np.nanmedian(d):.3g}",
                        "smallest": f"{np.nanmin(d):.3g}",
                    }
                )
        if table:
            where = ", ".join(
                f"{c} = {rows[c].iloc[0]}" for c in ("n_tokens", "feature_dim") if c in rows.columns
            )
            out += [
                f"## One layer at a time ({md_escape(where)})",
                "",
                "Each replaced layer alone (the others exact), from the exact model's input of that layer; per-layer "
                "values with their MCSE are in `pairs.parquet`.",
                "",
                to_markdown(pd.DataFrame(table)).rstrip("\n"),
                "",
            ]
    return out
