"""Regenerate the figures shown in the README and the docs from the code, so they cannot go stale.

Each image is one figure of a built-in study, run with the profile the text describes (the full
profile unless the entry says quick) and drawn by the same code as ``rfkit run``'s report
(:func:`rfkit.report.plot_result`) at the two-column paper size::

    python scripts/make_figures.py              # every image (full profiles: see below)
    python scripts/make_figures.py --quick      # the same figures from the quick profiles (a smoke test)
    python scripts/make_figures.py --out-dir /tmp/images
    python scripts/make_figures.py --reuse out  # draw from finished runs in out/<study>[-<profile>]
    python scripts/make_figures.py --saved drop-in=out/drop-in   # draw from a finished run's folder

``--saved STUDY=DIR`` draws a study's images from a run folder that ``rfkit run`` wrote (verified by
:func:`rfkit.study.load`) instead of running the study again: the drop-in study's full profile takes
about an hour on two cores.

``make figures`` runs the first form. A study named ``"study:profile"`` runs that profile
(``rfkit run study --profile profile``); the long profile of real-attention takes about 45
minutes on 2 cores, so after ``rfkit run real-attention --profile long`` (which writes
``out/real-attention-long``) pass ``--reuse out`` to draw from that run instead: a run is
reused only if its recorded design hash is the design's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

import rfkit.study as st  # noqa: E402
from rfkit.report import plot_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: (image file under docs/images, built-in study, figure name, quick profile?): where each image comes from
IMAGES = [
    # README: "make demo: MSE of the trigonometric, positive and hyperbolic estimators ..., 2000 trials per point"
    ("performer-mse.png", "performer-mse", "mse_vs_features", False),
    # docs page Sparse + random features, "Measured": median output MSE against cost per query, real heads
    ("hybrid-mse-vs-cost.png", "real-attention:long", "mse_vs_cost", False),
    # the same page: per-head MSE ratio to FAVOR+, decoder heads at n = 1,024, cost 64 per query
    (
        "hybrid-ratio-decoder-1024.png",
        "real-attention:long",
        "ratio_to_reference_causal-True_feature_dim-64_max_len-1024",
        False,
    ),
    # docs page "Drop-in": the full profile (its notes say how long it runs)
    ("drop-in-kl.png", "drop-in", "dropin_damage_vs_budget_kl", False),
    ("drop-in-embedding.png", "drop-in", "dropin_damage_vs_budget_emb_cos", False),
    ("drop-in-per-layer.png", "drop-in", "dropin_per_layer", False),  # the first one-layer cell
    ("drop-in-proxy.png", "drop-in", "dropin_proxy", False),
    # docs pages Home and Built-in studies: small figures, one column wide (3.5 in)
    ("performer-mse-small.png", "performer-mse", "mse_vs_features", False),
    ("attention-estimators-small.png", "attention-estimators", "mse_vs_samples", False),
]
#: images drawn one column wide (3.5 in, fonts of 6-7 pt) for pages that show them small: at
#: 448 CSS px (4/3 of their drawn size) their smallest text reads as 8 pt
ONE_COLUMN = {"performer-mse-small.png", "attention-estimators-small.png"}


def _design(study: str, quick: bool) -> st.Design:
    """The design an entry names: ``"study"`` or ``"study:profile"``, quick or not."""
    name, _, profile = study.partition(":")
    path = st.builtin_study(name)
    if profile:
        return st.load_design(path, profile=f"{profile}.quick" if quick else profile)
    design = st.load_design(path)
    return design.quick_profile() if quick else design


def _reused(folder: Path, design: st.Design) -> st.StudyResult | None:
    """The finished run in ``folder`` if it is of ``design`` (same hash), else None."""
    manifest = folder / "manifest.json"
    if not manifest.exists() or json.loads(manifest.read_text()).get("design_hash") != design.hash():
        return None
    return st.load(folder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="run every study's quick profile (a smoke test)")
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=ROOT / "docs" / "images",
        help="folder for the images (default: docs/images)",
    )
    ap.add_argument("--workers", type=int, default=None, help="worker processes per study (default: serial)")
    ap.add_argument("--dpi", type=int, default=150, help="resolution of the PNG images (default: 150)")
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        metavar="DIR",
        help="draw from finished runs of the same design in DIR/<study>[-<profile>] instead of running them",
    )
    ap.add_argument(
        "--saved",
        action="append",
        default=[],
        metavar="STUDY=DIR",
        help="draw STUDY's images from the run folder DIR instead of running it (repeatable)",
    )
    args = ap.parse_args(argv)
    saved = dict(item.split("=", 1) for item in args.saved)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, bool], st.StudyResult] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for image, study, figure, quick in IMAGES:
            quick = quick or args.quick
            key = (study, quick)
            if key not in runs and study in saved and not args.quick:
                runs[key] = st.load(saved[study])
                print(f"read {study} from {saved[study]}")
            if key not in runs:
                t0 = time.perf_counter()
                design = _design(study, quick)
                folder = study.replace(":", "-")
                found = None if args.reuse is None else _reused(args.reuse / folder, design)
                if found is not None:
                    runs[key] = found
                    print(f"reused {args.reuse / folder} for {study}{' (quick)' if quick else ''}")
                else:
                    executor = "processes" if args.workers else "serial"
                    runs[key] = st.run(
                        design,
                        out=Path(tmp) / f"{folder}{'-quick' if quick else ''}",
                        executor=executor,
                        workers=args.workers,
                        progress=False,
                    )
                    print(f"ran {study}{' (quick)' if quick else ''} in {time.perf_counter() - t0:.0f} s")
            size = "one-column" if image in ONE_COLUMN else "two-column"
            drawn = plot_result(runs[key], figure, size=size)  # its Axes, or one per panel
            fig = (drawn if isinstance(drawn, Axes) else drawn[0]).figure
            path = args.out_dir / image
            fig.savefig(path, dpi=args.dpi)
            plt.close(fig)
            print(f"wrote {path} ({figure} of {study})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
