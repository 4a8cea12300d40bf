"""The small fixed cost of a study: statistics without statsmodels, PDF font subsets made
once, plain-text log tick labels, rewound trial generators, SciPy's stats module not imported for QMC.
Each replacement is checked against what it replaces."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from rfkit._random import RewoundGenerators
from rfkit.study._mcse import mcse_summary


@pytest.mark.parametrize("n", [2, 3, 7, 40, 1000])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_t_interval_is_statsmodels(n, confidence):
    from statsmodels.stats.weightstats import DescrStatsW

    v = np.random.default_rng(n).standard_normal(n) * 3 + 1
    s = mcse_summary(v, confidence)
    lo, hi = DescrStatsW(v).tconfint_mean(alpha=1 - confidence)
    np.testing.assert_allclose([s["ci_low"], s["ci_high"]], [lo, hi], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("n, k", [(1, 0), (1, 1), (12, 0), (12, 5), (40, 40), (1000, 937)])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_wilson_interval_is_statsmodels(n, k, confidence):
    from statsmodels.stats.proportion import proportion_confint

    v = np.r_[np.ones(k), np.zeros(n - k)]
    s = mcse_summary(v, confidence, proportion=True)
    lo, hi = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
    np.testing.assert_allclose([s["ci_low"], s["ci_high"]], [lo, hi], rtol=1e-13, atol=1e-15)


def test_rewound_generators_repeat_their_streams():
    streams = [np.random.SeedSequence(11, spawn_key=(2, t)) for t in range(5)]
    gens = RewoundGenerators(streams)
    first = [g.standard_normal(3) for g in gens.fresh()]
    again = [g.standard_normal(3) for g in gens.fresh()]
    alone = [np.random.default_rng(s).standard_normal(3) for s in streams]
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, alone)
    with pytest.raises(Exception, match="SeedSequence"):
        RewoundGenerators([np.random.default_rng(0)])


def test_qmc_draw_does_not_import_scipy_stats():
    code = (
        "import sys, rfkit as rk\n"
        "rk.projections.sample_projection('qmc', 16, 5, rng=0)\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_log_tick_labels_are_plain_text():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from rfkit.plots import label_axes

    fig, ax = plt.subplots()
    ax.plot([1, 2, 64], [1e-3, 1e-2, 3.0])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    label_axes(ax, "x", "y")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert labels and not any("$" in t for t in labels)
    assert "10⁻²" in labels and "2⁶" in labels


def test_pdf_font_subsets_are_reused_and_checked(tmp_path, monkeypatch):
    """A second figure reuses the first one's subset (memory, then disk); a damaged disk entry is
    made again; the PDFs embed TrueType (Type 42 / CIDFontType2) fonts either way."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from rfkit.plots import _fonts, save_figure

    monkeypatch.setattr(_fonts, "_disk_folder", lambda: tmp_path / "cache")
    monkeypatch.setattr(_fonts, "_CACHE", {})
    made = []

    def draw(name: str, text: str) -> bytes:
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1], label=text)
        ax.set_title(text)
        save_figure(fig, tmp_path / name)
        plt.close(fig)
        return (tmp_path / f"{name}.pdf").read_bytes()

    from matplotlib.backends import _backend_pdf_ps as pdfps

    original = pdfps.get_glyphs_subset

    def counting(fontfile, glyphs):
        made.append(len(glyphs))
        return original(fontfile, glyphs)

    monkeypatch.setattr(pdfps, "get_glyphs_subset", counting)
    a = draw("a", "MSE ± 2 MCSE, α = 0.5")
    assert made, "the first figure makes its subset"
    n_made = len(made)
    b = draw("b", "relative MSE, β")
    assert len(made) == n_made, "the second figure reuses the subset in memory"
    monkeypatch.setattr(_fonts, "_CACHE", {})
    draw("c", "MSE ± 2 MCSE, α = 0.5")
    assert len(made) == n_made, "a new process (empty memory cache) reads the subset from disk"
    for f in (tmp_path / "cache").glob("*.ttf"):
        f.write_bytes(f.read_bytes()[:-7])  # damaged: no longer matches its checksum
    monkeypatch.setattr(_fonts, "_CACHE", {})
    draw("d", "MSE ± 2 MCSE, α = 0.5")
    assert len(made) > n_made, "a damaged entry is made again"
    for pdf in (a, b):
        assert b"/CIDFontType2" in pdf and b"/FontFile2" in pdf and b"/Type3" not in pdf


def test_report_figures_in_worker_processes_equal_the_serial_report(tmp_path, monkeypatch):
    """``write_report(workers=2)`` draws the figures in two processes: the same files, the same report
    (but for the run's own time), every file recorded in the manifest."""
    import json

    import rfkit.report._markdown as markdown
    import rfkit.study as st
    from rfkit.report import write_report

    monkeypatch.setattr(markdown, "MIN_PARALLEL", 1)
    res = st.run("performer-mse", quick=True, trials=20, out=tmp_path / "a", progress=False)
    st.run("performer-mse", quick=True, trials=20, out=tmp_path / "b", progress=False)
    write_report(res, tmp_path / "a")
    write_report(res, tmp_path / "b", workers=2)
    a, b = (sorted(p.name for p in (tmp_path / x / "figures").iterdir()) for x in "ab")
    assert a == b and len(a) == 4
    # to the byte: the workers' design is the lead's, its source included (the captions name the
    # quick profile), and a PDF depends on its figure only (no creation date; the font subset is
    # not that of the figures the lead drew before)
    for name in a:
        assert (tmp_path / "a" / "figures" / name).read_bytes() == (
            tmp_path / "b" / "figures" / name
        ).read_bytes(), name
    ra, rb = ((tmp_path / x / "report.md").read_text() for x in "ab")
    assert ra == rb
    files = json.loads((tmp_path / "b" / "manifest.json").read_text())["files"]
    assert {f"figures/{n}" for n in b} <= set(files)
    # the text's tables, written by the lead while the workers draw, are recorded as in the serial run
    serial = json.loads((tmp_path / "a" / "manifest.json").read_text())["files"]
    assert set(files) == set(serial) and any(f.startswith("tables/") for f in files)


def test_report_figure_workers_have_the_leads_path_folder_and_imports(tmp_path, monkeypatch):
    """Figure workers fork from a server that may have started long before (here: before the
    folder of the user's module was on the path, in another working folder). They take the
    lead's path, environment and folder and import the design's ``imports``, so a registered
    map's display name is in their legends as in the lead's: the same files, byte for byte."""
    import textwrap

    import rfkit.report._markdown as markdown
    import rfkit.study as st
    from rfkit._parallel import start_process_server
    from rfkit.report import write_report
    from rfkit.study import _records

    start_process_server()
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "named_trig_mod.py").write_text(
        textwrap.dedent(
            """
            import rfkit as rk
            import rfkit.study as st

            st.register_feature_map(
                st.FeatureMapRecord(
                    "NamedTrig", rk.features.Trig, display_name="Named trig",
                    capabilities=st.Capabilities(batched=True),
                )
            )
            """
        )
    )
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(markdown, "MIN_PARALLEL", 1)
    saved = {k: dict(v) for k, v in _records._REGISTRIES.items()}
    try:
        design = st.Design(
            name="named",
            estimators=[{"map": "NamedTrig"}, {"map": "Positive"}],
            grid={"n_features": [4, 8]},
            data={"source": "pairs", "n_pairs": 5, "dim": 3, "norm": 0.7},
            trials=9,
            seed=5,
            imports=["named_trig_mod"],
            outputs={"figures": ["mse_vs_features"]},
        )
        res = st.run(design, out="a", progress=False)  # relative folders: the workers' folder is the lead's
        st.run(design, out="b", progress=False)
        write_report(res, "a")
        write_report(res, "b", workers=2)
    finally:
        for k, v in saved.items():
            _records._REGISTRIES[k].clear()
            _records._REGISTRIES[k].update(v)
        sys.modules.pop("named_trig_mod", None)
    names = sorted(p.name for p in (tmp_path / "a" / "figures").iterdir())
    assert names and names == sorted(p.name for p in (tmp_path / "b" / "figures").iterdir())
    for name in names:
        assert (tmp_path / "a" / "figures" / name).read_bytes() == (
            tmp_path / "b" / "figures" / name
        ).read_bytes()


def test_cli_run_draws_figures_in_as_many_processes_as_threads(tmp_path, monkeypatch):
    """``rfkit run`` without ``--workers`` draws the report's figures in as many processes as rfkit's
    threads (``RFKIT_NUM_THREADS``); ``--workers 1``, one thread, or a process server that
    cannot start, draws them in the lead; the figures are the same files either way."""
    import rfkit.report._markdown as markdown
    from rfkit.cli import main as cli_main

    used: list[int] = []

    class Spy(markdown.FiguresInWorkers):
        def __init__(self, design, out, names, workers):
            used.append(workers)
            super().__init__(design, out, names, workers)

    monkeypatch.setattr(markdown, "FiguresInWorkers", Spy)
    args = ["run", "performer-mse", "--quick", "--trials", "20", "--no-progress", "--out"]
    monkeypatch.setenv("RFKIT_NUM_THREADS", "2")
    assert cli_main([*args, str(tmp_path / "a")]) == 0
    assert used == [2]
    assert cli_main([*args, str(tmp_path / "b"), "--workers", "1"]) == 0
    monkeypatch.setenv("RFKIT_NUM_THREADS", "1")
    assert cli_main([*args, str(tmp_path / "c")]) == 0
    assert used == [2], "one worker or one thread: the lead draws"
    import multiprocessing.forkserver as forkserver

    def refused():
        raise OSError("no sockets here")

    monkeypatch.setattr(forkserver, "ensure_running", refused)
    monkeypatch.setenv("RFKIT_NUM_THREADS", "2")
    assert cli_main([*args, str(tmp_path / "d")]) == 0
    assert used == [2], "no process server could start: the default draws in the lead"
    names = sorted(p.name for p in (tmp_path / "a" / "figures").iterdir())
    assert len(names) == 4
    for x in "bcd":
        assert sorted(p.name for p in (tmp_path / x / "figures").iterdir()) == names
        for name in names:
            assert (tmp_path / x / "figures" / name).read_bytes() == (
                tmp_path / "a" / "figures" / name
            ).read_bytes()


def test_unguarded_script_gets_its_figures_drawn_in_the_lead_with_a_warning(tmp_path):
    """A script that calls ``rfkit.cli.main`` at module level, without a ``__main__`` guard: each
    figure worker re-runs the script while it starts (Python's multiprocessing rule) and dies. The
    pool breaks; the lead draws the figures itself, warns why, and the run succeeds."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "o"
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        "from rfkit.cli import main\n"
        f"sys.exit(main(['run', 'performer-mse', '--quick', '--trials', '20', '--no-progress', '--out', {str(out)!r}]))\n"
    )
    env = {**os.environ, "RFKIT_NUM_THREADS": "2", "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "figure worker processes failed" in r.stderr and "__main__" in r.stderr
    # the workers re-running the script say so, instead of an "unexpected error"
    assert "not run in this worker process" in r.stderr and "unexpected error" not in r.stderr
    assert len(list((out / "figures").iterdir())) == 4
    import rfkit.study as st

    assert st.verify_run(out).ok
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "import sys\n"
        "from rfkit.cli import main\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit(main(['run', 'performer-mse', '--quick', '--trials', '20', '--no-progress', '--out', {str(tmp_path / 'g')!r}]))\n"
    )
    r = subprocess.run([sys.executable, str(guarded)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "warning" not in r.stderr and "not run" not in r.stderr, r.stderr


def test_cli_runs_where_an_older_main_module_is_registered_as_mp_main(tmp_path, monkeypatch):
    """``multiprocessing`` registers ``__main__`` as ``__mp_main__`` when it is imported; a program
    that replaces ``__main__`` later (IPython does) leaves an older module there. Only a module
    *named* ``__mp_main__`` that is not yet ``__main__`` (a worker re-running the script) stops
    ``rfkit.cli.main``."""
    import types

    from rfkit.cli import main as cli_main

    monkeypatch.setitem(sys.modules, "__mp_main__", types.ModuleType("__main__"))
    assert cli_main(["list"]) == 0
    monkeypatch.setitem(sys.modules, "__mp_main__", types.ModuleType("__mp_main__"))
    assert cli_main(["list"]) == 2


def test_worker_server_preload_is_the_figure_workers_and_starts_early():
    import multiprocessing.forkserver as forkserver

    from rfkit._parallel import start_process_server
    from rfkit.cli._study_args import FIGURE_WORKER_PRELOAD
    from rfkit.report._parallel_figures import PRELOAD

    assert PRELOAD == [FIGURE_WORKER_PRELOAD]
    start_process_server()
    pid = forkserver._forkserver._forkserver_pid
    assert pid is not None and os.waitpid(pid, os.WNOHANG) == (0, 0), "the server runs"


def test_report_error_while_workers_draw_stops_them_and_propagates(tmp_path, monkeypatch):
    """An error in the lead's part of a report (its text) while workers draw figures is raised as
    it is, after the workers stop: the pool is shut down, nothing is left running."""
    import multiprocessing

    import rfkit.report._markdown as markdown
    import rfkit.study as st
    from rfkit.report import write_report

    monkeypatch.setattr(markdown, "MIN_PARALLEL", 1)
    res = st.run("performer-mse", quick=True, trials=20, out=tmp_path / "a", progress=False)

    def broken(*args, **kwargs):
        raise RuntimeError("the text failed")

    monkeypatch.setattr(markdown, "_body", broken)
    with pytest.raises(RuntimeError, match="the text failed"):
        write_report(res, tmp_path / "a", workers=2)
    assert not multiprocessing.active_children()
    assert not (tmp_path / "a" / "report.md").exists()


def test_save_figure_keeps_room_for_a_many_entry_legend(tmp_path, figure_layout):
    """A study figure with a legend below the axes in columns (18 series, wide) keeps it off the
    axes and their labels after save_figure: the layout runs before the legend is anchored."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import pandas as pd

    from rfkit.plots import plot_mse_vs_features, save_figure

    rows = [
        {
            "estimator": f"estimator-{i:02d}",
            "n_features": m,
            "metric": "mse",
            "estimate": 1.0 / m + i,
            "mcse": 0.01,
        }
        for i in range(18)
        for m in (16, 32, 64)
    ]
    ax = plot_mse_vs_features(pd.DataFrame(rows), size="two-column", title="a caption")
    fig = ax.figure
    save_figure(fig, tmp_path / "f")
    assert figure_layout.legend_gap(fig) >= 0, "the legend overlaps the axes"
    plt.close(fig)


def test_save_figure_png_is_the_cropped_layout_drawing(tmp_path, figure_layout):
    """One Agg drawing makes the layout and the PNG: the PNG equals matplotlib's own savefig of the
    same (pixel-aligned) box, figure legends stay where the layout put them in the PNG and the PDF,
    and the figure is left as it was (canvas, legend anchors, dpi)."""
    import io
    import math

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.transforms import Bbox
    from PIL import Image

    from rfkit.plots import save_figure
    from rfkit.plots._style import plain_log_ticks

    def make():
        fig, axes = plt.subplots(1, 2, figsize=(6, 2.5), layout="constrained")
        for i, ax in enumerate(axes):
            ax.loglog([1, 2, 4, 8], [1e-3, 3e-4, 1e-4, 2e-5], marker="o", label=f"series {i}")
        fig.legend(loc="outside lower center", ncol=2)
        fig.suptitle("a caption line")
        return fig

    fig = make()
    canvas, dpi = fig.canvas, fig.get_dpi()
    pdf, png = save_figure(fig, tmp_path / "f")
    assert fig.canvas is canvas and fig.get_dpi() == dpi and fig.legends[0].get_bbox_to_anchor() is fig.bbox
    new = np.asarray(Image.open(png))
    assert figure_layout.legend_gap(fig) >= 0, "the legend overlaps the axes"
    plt.close(fig)

    ref = make()  # the same layout and box through savefig, the legend anchored to the content
    ref.set_dpi(200)
    for ax in ref.get_axes():
        plain_log_ticks(ax)
    ref.draw_without_rendering()  # the layout makes room for the legend, then it is anchored
    ref.legends[0].set_bbox_to_anchor(Bbox.unit(), transform=ref.transFigure)
    t, pad = ref.get_tightbbox(), matplotlib.rcParams["savefig.pad_inches"]
    box = [math.floor((t.x0 - pad) * 200), math.floor((t.y0 - pad) * 200)]
    box += [math.ceil((t.x1 + pad) * 200), math.ceil((t.y1 + pad) * 200)]
    ref.set_layout_engine(None)
    buf = io.BytesIO()
    ref.savefig(buf, format="png", bbox_inches=Bbox.from_extents(*(v / 200 for v in box)), dpi=200)
    plt.close(ref)
    old = np.asarray(Image.open(io.BytesIO(buf.getvalue())))
    # an opaque figure's PNG is RGB: the same pixels as matplotlib's RGBA file, whose alpha is all 255
    assert new.shape == old.shape[:2] + (3,) and np.array_equal(new, old[..., :3])
    assert (old[..., 3] == 255).all()
    # the padding below the legend is kept: the last rows of the PNG are background only
    assert (new[-5:] == new[-1, 0]).all()
    assert pdf.read_bytes().startswith(b"%PDF")


def test_save_figure_keeps_artists_beyond_the_canvas(tmp_path):
    """A legend placed outside a figure without a layout engine lies beyond the canvas: the PNG is
    matplotlib's own drawing of the tight box then, so nothing is cut off."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from PIL import Image

    from rfkit.plots import save_figure

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a long legend entry outside the axes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    _, png = save_figure(fig, tmp_path / "f")
    w_in = fig.get_size_inches()[0]
    plt.close(fig)
    arr = np.asarray(Image.open(png))
    assert arr.shape[1] > w_in * 200 + 100  # the box holds the legend's width beyond the figure
    beyond = arr[:, -100:-20]  # columns beyond the canvas, short of the padding: the legend is drawn there
    assert (beyond != arr[0, 0]).any()


def test_save_figure_keeps_alpha_of_a_transparent_figure(tmp_path):
    """An opaque figure's PNG is RGB; one with a transparent background keeps its alpha channel."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from PIL import Image

    from rfkit.plots import save_figure

    modes = []
    for alpha in (1.0, 0.0):
        fig, ax = plt.subplots(figsize=(2, 1.5), layout="constrained")
        ax.plot([0, 1], [0, 1])
        fig.patch.set_alpha(alpha)
        ax.patch.set_alpha(alpha)
        _, png = save_figure(fig, tmp_path / f"f{alpha}")
        plt.close(fig)
        with Image.open(png) as im:
            modes.append((im.mode, np.asarray(im)[0, 0].tolist(), round(im.info["dpi"][0])))
    assert modes[0] == ("RGB", [255, 255, 255], 200)
    assert modes[1] == ("RGBA", [255, 255, 255, 0], 200)


def test_figures_that_cannot_be_sent_to_their_workers_raise_and_never_hang():
    """A figure task that cannot be pickled (a design holding an object of the user's that does not
    pickle) raises its error from ``result``; leaving the block then cancels the other figures
    without ``shutdown(cancel_futures=True)``, which waits forever there on Python 3.11
    (https://github.com/python/cpython/issues/116685). Run in a fresh interpreter, so that a hang
    fails the test instead of the suite.
    """
    code = (
        "import pathlib, tempfile, types\n"
        "from rfkit.report._parallel_figures import FiguresInWorkers\n"
        "if __name__ == '__main__':\n"
        "    design = types.SimpleNamespace(to_dict=lambda: {'x': lambda: 1}, source='python')\n"
        "    out = pathlib.Path(tempfile.mkdtemp())\n"
        "    names = [('kind', f'figure{i}') for i in range(64)]\n"
        "    for attempt in range(3):\n"
        "        try:\n"
        "            with FiguresInWorkers(design, out, names, 2) as figures:\n"
        "                figures.result()\n"
        "        except Exception as exc:\n"
        "            print(attempt, type(exc).__name__, flush=True)\n"
    )
    import rfkit

    root = os.path.dirname(os.path.dirname(os.path.abspath(rfkit.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[0::2] == ["0", "1", "2"]
    assert set(lines[1::2]) <= {"PicklingError", "AttributeError", "TypeError"}, proc.stdout
