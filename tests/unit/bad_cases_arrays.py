"""Bad inputs of studies on arrays of your own (``source = "arrays"``): files, arrays in memory, masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from bad_input_kit import Bad

import rfkit.study as st
from rfkit.exceptions import DataChecksumError, InvalidParameterError, NonFiniteInputError, ShapeError

_R = np.random.default_rng(7)
Q = 0.3 * _R.normal(size=(2, 6, 3))
K = 0.3 * _R.normal(size=(2, 6, 3))


def _design(**data: Any) -> st.Design:
    return st.Design(
        name="own",
        kind="attention",
        trials=2,
        seed=1,
        data={"source": "arrays", **data},
        grid={"samples": [4]},
        estimators=[{"estimator": "RFA", "map": "Positive"}],
    )


def _mem(**arrays: Any) -> Any:
    return lambda t: st.run(_design(), data={"q": Q, "k": K, **arrays})


def _with(name: str, value: Any) -> Any:
    arrays = {"q": Q, "k": K, name: value}
    return lambda t: st.run(_design(), data=arrays)


def _file(t: Path, **arrays: Any) -> str:
    path = t / "qk.npz"
    np.savez(path, **arrays)
    return str(path)


def _nan() -> np.ndarray:
    q = Q.copy()
    q[1, 2, 0] = np.nan
    return q


def _ragged() -> np.ndarray:
    m = np.ones(Q.shape[:-1], dtype=bool)
    m[0, -1] = False
    return m


CASES: list[Bad] = [
    Bad("arrays-no-k", lambda t: st.run(_design(), data={"q": Q}), InvalidParameterError, "`k`", "no 'k'"),
    Bad("arrays-extra", _mem(attn=Q), InvalidParameterError, "`data` must hold only", "['attn']"),
    Bad(
        "arrays-not-arrays", lambda t: st.run(_design(), data=[Q, K]), InvalidParameterError, "`data`", "list"
    ),
    Bad("arrays-int-q", _with("q", np.ones((2, 6, 3), dtype=int)), InvalidParameterError, "['q']", "int64"),
    Bad("arrays-float16-k", _with("k", K.astype(np.float16)), InvalidParameterError, "['k']", "float16"),
    Bad("arrays-float-mask", _mem(mask=np.ones((2, 6))), InvalidParameterError, "['mask']", "float64"),
    Bad("arrays-k-shape", _with("k", K[:, :5]), ShapeError, "['k']", "(2, 5, 3)"),
    Bad("arrays-v-shape", _mem(v=np.ones((2, 5, 3))), ShapeError, "['v']", "(2, 5, 3)"),
    Bad(
        "arrays-q-4d",
        lambda t: st.run(_design(), data={"q": Q[None], "k": K[None]}),
        ShapeError,
        "['q']",
        "(1, 2, 6, 3)",
    ),
    Bad(
        "arrays-q-empty",
        lambda t: st.run(_design(), data={"q": Q[:, :0], "k": K[:, :0]}),
        ShapeError,
        "['q']",
        "(2, 0, 3)",
    ),
    Bad(
        "arrays-nan",
        lambda t: st.run(_design(), data={"q": _nan(), "k": K}),
        NonFiniteInputError,
        "['q']",
        "(1, 2, 0)",
    ),
    Bad("arrays-inf-v", _mem(v=np.full((2, 6, 2), np.inf)), NonFiniteInputError, "['v']", "inf"),
    Bad("arrays-mask-shape", _mem(mask=np.ones((6,), dtype=bool)), ShapeError, "['mask']", "(6,)"),
    Bad("arrays-mask-ragged", _mem(mask=_ragged()), ShapeError, "['mask']", "[5, 6]"),
    Bad("arrays-mask-empty", _mem(mask=np.zeros((2, 6), dtype=bool)), ShapeError, "['mask']", "[0]"),
    Bad(
        "arrays-neither",
        lambda t: st.run(_design()),
        InvalidParameterError,
        "`data.file`",
        "data = None",
    ),
    Bad(
        "arrays-both",
        lambda t: st.run(_design(file=_file(t, q=Q, k=K)), data={"q": Q, "k": K}),
        InvalidParameterError,
        "exactly one",
        "data = dict",
    ),
    Bad(
        "arrays-data-for-other-source",
        lambda t: st.run(
            st.Design(**{**_design().to_dict(), "data": {"source": "sequence", "n_tokens": 4, "dim": 2}}),
            data={"q": Q, "k": K},
        ),
        InvalidParameterError,
        "`data`",
        "'sequence'",
    ),
    Bad(
        "arrays-file-missing",
        lambda t: st.run(_design(file=str(t / "no.npz"))),
        InvalidParameterError,
        "`data.file`",
        "no.npz",
    ),
    Bad(
        "arrays-file-not-npz",
        lambda t: (t / "x.npz").write_text("hello") and st.run(_design(file=str(t / "x.npz"))),
        InvalidParameterError,
        "`data.file`",
        "x.npz",
    ),
    Bad(
        "arrays-file-bad-dtype",
        lambda t: st.run(_design(file=_file(t, q=Q.astype(np.int32), k=K))),
        InvalidParameterError,
        "['q']",
        "int32",
    ),
    Bad(
        "arrays-sha256-pinned",
        lambda t: st.run(_design(file=_file(t, q=Q, k=K), sha256="ab" * 32)),
        DataChecksumError,
        "`data.sha256`",
        "ab" * 32,
    ),
    Bad(
        "arrays-dim",
        lambda t: st.run(_design(dim=5), data={"q": Q, "k": K}),
        InvalidParameterError,
        "`data.dim`",
        "5",
    ),
    Bad(
        "arrays-head-3d",
        lambda t: st.run(_design(head=1), data={"q": Q, "k": K}),
        InvalidParameterError,
        "`data.layer` and `data.head`",
        "head=1",
    ),
    Bad(
        "arrays-head-out-of-range",
        lambda t: st.run(_design(head=4), data={"q": Q[:, None, None], "k": K[:, None, None]}),
        InvalidParameterError,
        "`data.head`",
        "Got 4",
    ),
]
