"""Bad inputs at the door of a study: study files, names and labels, sizes, and the command line.

Every value of a study file is checked when the design is built (range and type, naming the
file and the key), names and labels are safe file names, a study far beyond the machine is
refused with its estimate, and the command line answers every mistake with one line and an
exit status (no traceback).
"""

from __future__ import annotations

from pathlib import Path

from bad_input_kit import GOOD_TOML, Bad, Cli, _design, _toml

import rfkit.study as st
from rfkit.exceptions import InvalidParameterError
from rfkit.study import StudyTooLargeError

_ATTN_TOML = """
name = "a"
kind = "attention"
trials = 2
seed = 1
[data]
source = "sequence"
n_tokens = 8
dim = 4
[grid]
feature_dim = [8]
[[estimators]]
estimator = "rfa"
map = "Positive"
"""


def _bad_value(key: str, line: str, arg: str, value: str) -> Bad:
    """A study file whose ``[data]`` gets ``line``: refused by load_design, naming file and key."""
    name = line.split("=")[0].strip()
    old = next((x for x in GOOD_TOML.splitlines() if x.startswith(f"{name} =")), 'source = "pairs"')
    text = GOOD_TOML.replace(old, line if old.startswith(name) else f"{old}\n{line}")
    return Bad(
        f"load_design-{key}",
        lambda t: st.load_design(_toml(t, text)),
        InvalidParameterError,
        arg,
        value,
    )


def _file(t: Path, old: str, new: str, name: str = "s.toml") -> Path:
    return _toml(t, GOOD_TOML.replace(old, new), name)


def _latin1(t: Path) -> Path:
    p = t / "s.toml"
    p.write_bytes(GOOD_TOML.replace('name = "t"', 'name = "t"\ndescription = "café"').encode("latin-1"))
    return p


def _run_argv(*extra: str) -> object:
    return lambda t: ["run", str(_toml(t, GOOD_TOML)), "--out", str(t / "o"), "--no-progress", *extra]


CASES: list[Bad] = [
    # ------------------------------------------------------------------ values of [data], by range
    _bad_value("norm_x-nan", "norm_x = nan", "`data.norm_x`", "nan"),
    _bad_value("norm_x-inf", "norm_x = inf", "`data.norm_x`", "inf"),
    _bad_value("norm_x-negative", "norm_x = -1.0", "`data.norm_x`", "-1.0"),
    _bad_value("norm_y-string", 'norm_y = "big"', "`data.norm_y`", "'big'"),
    _bad_value("cosine-2", "cosine = 2.0", "`data.cosine`", "2.0"),
    _bad_value("cosine-nan", "cosine = nan", "`data.cosine`", "nan"),
    _bad_value("n_pairs-0", "n_pairs = 0", "`data.n_pairs`", "Got 0"),
    _bad_value("n_pairs-float", "n_pairs = 2.5", "`data.n_pairs`", "2.5"),
    _bad_value("n_pairs-bool", "n_pairs = true", "`data.n_pairs`", "True"),
    Bad(
        "load_design-dim-0",
        lambda t: st.load_design(_file(t, "dim = 2", "dim = 0")),
        InvalidParameterError,
        "`data.dim`",
        "Got 0",
    ),
    Bad(
        "load_design-grid-norm-nan",
        lambda t: st.load_design(_file(t, "n_features = [2]", "n_features = [2]\nnorm = [1.0, nan]")),
        InvalidParameterError,
        "`grid.norm`",
        "nan",
    ),
    Bad(
        "load_design-grid-cosine",
        lambda t: st.load_design(_file(t, "n_features = [2]", "n_features = [2]\ncosine = [0.5, -1.5]")),
        InvalidParameterError,
        "`grid.cosine`",
        "-1.5",
    ),
    Bad(
        "load_design-n_tokens-0",
        lambda t: st.load_design(_toml(t, _ATTN_TOML.replace("n_tokens = 8", "n_tokens = 0"))),
        InvalidParameterError,
        "`data.n_tokens`",
        "Got 0",
    ),
    Bad(
        "load_design-spread-negative",
        lambda t: st.load_design(_toml(t, _ATTN_TOML.replace("n_tokens = 8", "n_tokens = 8\nspread = -0.1"))),
        InvalidParameterError,
        "`data.spread`",
        "-0.1",
    ),
    # ------------------------------------------------------------------ names against the registries
    Bad(
        "load_design-figure-misspelt",
        lambda t: st.load_design(
            _file(t, 'map = "Positive"', 'map = "Positive"\n[outputs]\nfigures = ["mse_vs_featurez"]')
        ),
        InvalidParameterError,
        "`outputs.figures`",
        "'mse_vs_featurez'",
    ),
    Bad(
        "Design-figures-not-a-list",
        lambda t: _design(outputs={"figures": "mse_vs_features"}),
        InvalidParameterError,
        "`outputs.figures`",
        "'mse_vs_features'",
    ),
    Bad(
        "load_design-map-misspelt",
        lambda t: st.load_design(_file(t, 'map = "Positive"', 'map = "Positve"')),
        InvalidParameterError,
        "`estimators[0].map`",
        "'Positve'",
    ),
    Bad(
        "Design-p-1",
        lambda t: _design(
            kind="concentration",
            data={"source": "gaussian", "n_pairs": 3, "dim": 2},
            grid={"p": [1.0], "n_features": [2]},
        ),
        InvalidParameterError,
        "`grid.p`",
        "1.0",
    ),
    Bad(
        "Design-cov_q-inf",
        lambda t: _design(data={"source": "gaussian", "n_pairs": 3, "dim": 2, "cov_q": [1.0, float("inf")]}),
        InvalidParameterError,
        "`data.cov_q`",
        "inf",
    ),
    # ------------------------------------------------------------------ other keys, by type
    Bad(
        "load_design-description-number",
        lambda t: st.load_design(_file(t, 'name = "t"', 'name = "t"\ndescription = 3')),
        InvalidParameterError,
        "`description`",
        "Got 3",
    ),
    Bad(
        "load_design-metrics-string",
        lambda t: st.load_design(_file(t, 'name = "t"', 'name = "t"\nmetrics = "mse"')),
        InvalidParameterError,
        "`metrics`",
        "'mse'",
    ),
    Bad(
        "load_design-seed-negative",
        lambda t: st.load_design(_file(t, "seed = 1", "seed = -3")),
        InvalidParameterError,
        "`seed`",
        "-3",
    ),
    Bad(
        "load_design-chunk_trials-0",
        lambda t: st.load_design(_file(t, "seed = 1", "seed = 1\nchunk_trials = 0")),
        InvalidParameterError,
        "`chunk_trials`",
        "Got 0",
    ),
    Bad(
        "load_design-allow_large-string",
        lambda t: st.load_design(_file(t, "seed = 1", 'seed = 1\nallow_large = "yes"')),
        InvalidParameterError,
        "`allow_large`",
        "'yes'",
    ),
    Bad(
        "load_design-latin1",
        lambda t: st.load_design(_latin1(t)),
        InvalidParameterError,
        "UTF-8",
        "0xe9",
    ),
    Bad(
        "load_design-folder",
        lambda t: st.load_design(t),
        InvalidParameterError,
        "study file",
        str(Path("/")),
    ),
    Bad(
        "load_design-imports-string",
        lambda t: st.load_design(_file(t, "seed = 1", 'seed = 1\nimports = "mymaps"')),
        InvalidParameterError,
        "`imports`",
        "'mymaps'",
    ),
    Bad(
        "load_design-empty-file",
        lambda t: st.load_design(_toml(t, "")),
        InvalidParameterError,
        "`name`",
        "is required",
    ),
    # ------------------------------------------------------------------ the [quick] profile, at load time
    Bad(
        "load_design-trials-float",
        lambda t: st.load_design(_file(t, "trials = 4", "trials = 2.5")),
        InvalidParameterError,
        "`trials`",
        "Got 2.5",
    ),
    Bad(
        "load_design-quick-chunk_trials-bool",
        lambda t: st.load_design(_toml(t, GOOD_TOML + "\n[quick]\nchunk_trials = true\n")),
        InvalidParameterError,
        "`quick.chunk_trials`",
        "Got True",
    ),
    Bad(
        "load_design-quick-trials-0",
        lambda t: st.load_design(_toml(t, GOOD_TOML + "\n[quick]\ntrials = 0\n")),
        InvalidParameterError,
        "`quick.trials`",
        "Got 0",
    ),
    Bad(
        "load_design-quick-grid-n_features-0",
        lambda t: st.load_design(_toml(t, GOOD_TOML + "\n[quick]\ngrid = { n_features = [0] }\n")),
        InvalidParameterError,
        "`quick.grid.n_features`",
        "Got 0",
    ),
    Bad(
        "load_design-quick-data-norm-nan",
        lambda t: st.load_design(_toml(t, GOOD_TOML + "\n[quick]\ndata = { norm_x = nan }\n")),
        InvalidParameterError,
        "`quick.data.norm_x`",
        "nan",
    ),
    Bad(
        "load_design-quick-unknown",
        lambda t: st.load_design(_toml(t, GOOD_TOML + "\n[quick]\ntrails = 3\n")),
        InvalidParameterError,
        "`quick.trails`",
        "'trails'",
    ),
    # ------------------------------------------------------------------ names and labels
    Bad("Design-name-dotdot", lambda t: _design(name=".."), InvalidParameterError, "`name`", "'..'"),
    Bad("Design-name-dot", lambda t: _design(name="."), InvalidParameterError, "`name`", "'.'"),
    Bad("Design-name-empty", lambda t: _design(name=""), InvalidParameterError, "`name`", "''"),
    Bad("Design-name-slash", lambda t: _design(name="a/b"), InvalidParameterError, "`name`", "'a/b'"),
    Bad("Design-name-backslash", lambda t: _design(name="a\\b"), InvalidParameterError, "`name`", "'a\\\\b'"),
    Bad("Design-name-newline", lambda t: _design(name="a\nb"), InvalidParameterError, "`name`", "'a\\nb'"),
    Bad("Design-name-colon", lambda t: _design(name="c:x"), InvalidParameterError, "`name`", "'c:x'"),
    Bad("Design-name-nul", lambda t: _design(name="nul"), InvalidParameterError, "`name`", "'nul'"),
    Bad("Design-name-long", lambda t: _design(name="x" * 101), InvalidParameterError, "`name`", "'xxxx"),
    Bad("Design-name-int", lambda t: _design(name=7), InvalidParameterError, "`name`", "Got 7"),
    Bad(
        "Design-label-empty",
        lambda t: _design(estimators=[{"map": "Positive", "label": ""}]),
        InvalidParameterError,
        "label`",
        "''",
    ),
    Bad(
        "Design-label-blank",
        lambda t: _design(estimators=[{"map": "Positive", "label": "  "}]),
        InvalidParameterError,
        "label`",
        "'  '",
    ),
    Bad(
        "Design-label-slash",
        lambda t: _design(estimators=[{"map": "Positive", "label": "../x"}]),
        InvalidParameterError,
        "label`",
        "'../x'",
    ),
    Bad(
        "Design-label-tab",
        lambda t: _design(estimators=[{"map": "Positive", "label": "a\tb"}]),
        InvalidParameterError,
        "label`",
        "'a\\tb'",
    ),
    Bad(
        "Design-label-case",
        lambda t: _design(
            estimators=[{"map": "Positive", "label": "Pos"}, {"map": "Positive", "label": "pos"}]
        ),
        InvalidParameterError,
        "estimators[1].label`",
        "'pos'",
    ),
    Bad(
        "Design-name-space", lambda t: _design(name="my study"), InvalidParameterError, "`name`", "'my study'"
    ),
    Bad("Design-name-CON", lambda t: _design(name="CON.toml"), InvalidParameterError, "`name`", "'CON.toml'"),
    Bad(
        "Design-label-leading-space",
        lambda t: _design(estimators=[{"map": "Positive", "label": " pos"}]),
        InvalidParameterError,
        "label`",
        "' pos'",
    ),
    Bad(
        "Design-label-long",
        lambda t: _design(estimators=[{"map": "Positive", "label": "p" * 101}]),
        InvalidParameterError,
        "label`",
        "'pppp",
    ),
    # Windows reserves these device names in any case and with any extension ("nul.txt"); the
    # superscript digits count as digits there (COM¹ is a serial port)
    *(
        Bad(
            f"Design-name-reserved-{n}",
            lambda t, n=n: _design(name=n),
            InvalidParameterError,
            "`name`",
            repr(n),
        )
        for n in (
            "COM0",
            "COM¹",
            "com²",
            "COM³",
            "LPT0",
            "LPT¹",
            "lpt²",
            "LPT³",
            "CONIN$",
            "conout$",
            "nul.txt",
        )
    ),
    Bad(
        "Design-label-reserved-CONOUT$",
        lambda t: _design(estimators=[{"map": "Positive", "label": "CONOUT$.log"}]),
        InvalidParameterError,
        "label`",
        "'CONOUT$.log'",
    ),
    Bad("Design-name-trailing-dot", lambda t: _design(name="t."), InvalidParameterError, "`name`", "'t.'"),
    Bad(
        "Design-label-trailing-dot",
        lambda t: _design(estimators=[{"map": "Positive", "label": "pos."}]),
        InvalidParameterError,
        "label`",
        "'pos.'",
    ),
    Bad(
        "Design-label-trailing-space",
        lambda t: _design(estimators=[{"map": "Positive", "label": "pos "}]),
        InvalidParameterError,
        "label`",
        "'pos '",
    ),
    # 100 characters but 400 bytes in UTF-8: too long for a file name (255 bytes) on most systems
    Bad(
        "Design-name-400-bytes",
        lambda t: _design(name="\U0001f600" * 100),
        InvalidParameterError,
        "`name`",
        "400 bytes",
    ),
    Bad(
        "Design-label-400-bytes",
        lambda t: _design(estimators=[{"map": "Positive", "label": "\U0001f600" * 100}]),
        InvalidParameterError,
        "label`",
        "400 bytes",
    ),
    # grid axes hold one value per cell (scalars): a list or table as a value was built, then
    # broke the result tables (pandas: unhashable type: 'list')
    Bad(
        "Design-grid-mean_q-vectors",
        lambda t: _design(
            data={"source": "gaussian", "n_pairs": 3, "dim": 2},
            grid={"n_features": [2], "mean_q": [[0.1, 0.2], [0.3, 0.1]]},
        ),
        InvalidParameterError,
        "`grid.mean_q`",
        "[0.1, 0.2]",
    ),
    Bad(
        "load_design-grid-scale_q-vectors",
        lambda t: st.load_design(
            _toml(
                t,
                GOOD_TOML.replace('"pairs"', '"gaussian"').replace(
                    "n_features = [2]", "n_features = [2]\nscale_q = [[1, 2], [3]]"
                ),
            )
        ),
        InvalidParameterError,
        "`grid.scale_q`",
        "[1, 2]",
    ),
    Bad(
        "load_design-grid-table-value",
        lambda t: st.load_design(
            _toml(
                t,
                GOOD_TOML.replace('"pairs"', '"gaussian"').replace(
                    "n_features = [2]", 'n_features = [2]\nmean_k = [{ name = "x" }]'
                ),
            )
        ),
        InvalidParameterError,
        "`grid.mean_k`",
        "{'name': 'x'}",
    ),
    Bad(
        "load_design-quick-grid-vectors",
        lambda t: st.load_design(
            _toml(
                t,
                GOOD_TOML.replace('"pairs"', '"gaussian"') + "\n[quick]\ngrid = { mean_k = [[0.5, 0.5]] }\n",
            )
        ),
        InvalidParameterError,
        "`quick.grid.mean_k`",
        "[0.5, 0.5]",
    ),
    Bad(
        "load_design-profile-grid-vectors",
        lambda t: st.load_design(
            _toml(
                t,
                GOOD_TOML.replace('"pairs"', '"gaussian"')
                + "\n[profiles.wide]\ngrid = { cov_q = [[1.0, 0.5], [0.5, 1.0]] }\n",
            )
        ),
        InvalidParameterError,
        "`profiles.wide.grid.cov_q`",
        "[1.0, 0.5]",
    ),
    Bad(
        "Design-grid-dim-negative",
        lambda t: _design(data={"source": "pairs", "n_pairs": 3}, grid={"n_features": [2], "dim": [2, -1]}),
        InvalidParameterError,
        "`grid.dim`",
        "-1",
    ),
    Bad(
        "Design-data-dim-float",
        lambda t: _design(data={"source": "pairs", "n_pairs": 3, "dim": 2.0}),
        InvalidParameterError,
        "`data.dim`",
        "2.0",
    ),
    Bad(
        "Design-data-n_pairs-1e3",
        lambda t: _design(data={"source": "pairs", "n_pairs": 1e3, "dim": 2}),
        InvalidParameterError,
        "`data.n_pairs`",
        "1000.0",
    ),
    # ------------------------------------------------------------------ sizes beyond the machine
    Bad(
        "Design-trials-huge",
        lambda t: _design(trials=10**13),
        StudyTooLargeError,
        "allow_large",
        "`trials` = 10000000000000",
    ),
    Bad(
        "Design-n_features-huge",
        lambda t: _design(grid={"n_features": [10**9]}),
        StudyTooLargeError,
        "allow_large",
        "GiB",
    ),
    Bad(
        "Design-n_pairs-huge",
        lambda t: _design(data={"source": "pairs", "n_pairs": 10**9, "dim": 2}),
        StudyTooLargeError,
        "study 't' is too large",
        "GiB",
    ),
    Bad(
        "Design-dim-huge",
        lambda t: _design(data={"source": "pairs", "n_pairs": 3, "dim": 10**10}),
        StudyTooLargeError,
        "too large",
        "GiB",
    ),
    Bad(
        "Design-cells-huge",
        lambda t: _design(grid={"n_features": list(range(1, 1001)), "norm": [float(i) for i in range(1000)]}),
        StudyTooLargeError,
        "grid cells",
        "1000000",
    ),
    Bad(
        "load_design-n_tokens-huge",
        lambda t: st.load_design(_toml(t, _ATTN_TOML.replace("n_tokens = 8", "n_tokens = 10_000_000"))),
        StudyTooLargeError,
        "s.toml",
        "allow_large",
    ),
    Bad(
        "run-trials-huge",
        lambda t: st.run(_design(), trials=10**13, out=t / "o", progress=False),
        StudyTooLargeError,
        "too large",
        "`trials` = 10000000000000",
    ),
    Bad(
        "load_design-allow_large-arg",
        lambda t: st.load_design(_toml(t, GOOD_TOML), allow_large="yes"),  # type: ignore[arg-type]
        InvalidParameterError,
        "`allow_large`",
        "'yes'",
    ),
]

CLI_CASES: list[Cli] = [
    Cli("run-out-empty", _run_argv("--out", ""), 2, "--out", "''"),
    Cli(
        "run-name-400-bytes",
        lambda t: [
            "run",
            str(_file(t, 'name = "t"', 'name = "' + "\U0001f600" * 100 + '"')),
            "--no-progress",
        ],
        2,
        "`name`",
        "400 bytes",
    ),
    Cli(
        "run-name-COM-superscript",
        lambda t: ["run", str(_file(t, 'name = "t"', 'name = "COM\u00b9"')), "--no-progress"],
        2,
        "`name`",
        "'COM\u00b9'",
    ),
    Cli(
        "run-name-dotdot",
        lambda t: ["run", str(_file(t, 'name = "t"', 'name = ".."')), "--no-progress"],
        2,
        "`name`",
        "'..'",
    ),
    Cli(
        "run-norm-nan",
        lambda t: ["run", str(_file(t, "dim = 2", "dim = 2\nnorm_x = nan")), "--out", str(t / "o")],
        2,
        "`data.norm_x`",
        "nan",
    ),
    Cli("run-latin1", lambda t: ["run", str(_latin1(t)), "--out", str(t / "o")], 2, "UTF-8", "s.toml"),
    Cli("run-trials-huge", _run_argv("--trials", str(10**13)), 2, "--allow-large", "GiB"),
    Cli("run-trials-negative", _run_argv("--trials", "-5"), 2, "--trials", "-5"),
    Cli("run-trials-text", _run_argv("--trials", "many"), 2, "--trials", "'many'"),
    Cli("run-seed-negative", _run_argv("--seed", "-1"), 2, "--seed", "-1"),
    Cli("run-workers-negative", _run_argv("--workers", "-2"), 2, "--workers", "-2"),
    Cli("run-scheduler-bogus", _run_argv("--scheduler", "bogus://x"), 2, "--scheduler", "'bogus://x'"),
    Cli("run-scheduler-empty", _run_argv("--scheduler", ""), 2, "--scheduler", "''"),
    Cli("run-scheduler-port", _run_argv("--scheduler", "tcp://host:99999"), 2, "--scheduler", "99999"),
    Cli("run-device-meta", _run_argv("--backend", "torch", "--device", "meta"), 2, "device", "meta"),
    Cli("run-device-numpy-cuda", _run_argv("--device", "cuda"), 2, "device", "cuda"),
    Cli(
        "run-device-cuda-99",
        _run_argv("--backend", "torch", "--device", "cuda:99"),
        2,
        "--device",
        "'cuda:99'",
    ),
    Cli("run-device-bogus", _run_argv("--backend", "torch", "--device", "bogus:7"), 2, "device", "bogus"),
    Cli("run-backend-bogus", _run_argv("--backend", "jax"), 2, "--backend", "'jax'"),
    Cli("run-option-misspelt", _run_argv("--quik"), 2, "--quik", "--quick"),
    Cli("run-option-unknown", _run_argv("--colour", "red"), 2, "unrecognized", "--colour"),
    Cli("command-misspelt", lambda t: ["rnu", "x"], 2, "'rnu'", "run"),
    Cli("list-extra", lambda t: ["list", "--quick"], 2, "unrecognized", "--quick"),
    Cli("run-no-study", lambda t: ["run"], 2, "study", "required"),
    Cli(
        "run-study-misspelt",
        lambda t: ["run", "performr-mse", "--no-progress"],
        2,
        "did you mean 'performer-mse'",
        "performr-mse",
    ),
    Cli("run-workers-float", _run_argv("--workers", "1.5"), 2, "`workers`", "'1.5'"),
    Cli("run-seed-float", _run_argv("--seed", "1e3"), 2, "`seed`", "'1e3'"),
    Cli("run-on-error-bogus", _run_argv("--on-error", "skip"), 2, "--on-error", "'skip'"),
    Cli("run-out-blank", _run_argv("--out", "   "), 2, "--out", "'   '"),
    Cli("bound-misspelt-kind", lambda t: ["bound", "chi"], 2, "'chi'", "chi2"),
    Cli("run-wait-lock-nan", _run_argv("--wait-lock", "nan"), 2, "--wait-lock", "'nan'"),
]
