"""The runner's parts: a run plan, typed messages between work units, one setup per cell."""

from __future__ import annotations

import dataclasses
import inspect
import json
import warnings

import pandas as pd
import pytest

import rfkit.study as st
from rfkit.exceptions import DamagedResultWarning
from rfkit.study import _eval_kernel
from rfkit.study._manifest import read_run_manifest, write_run_manifest


def kernel_design(**over):
    kw = dict(
        name="plan",
        estimators=[
            {"label": "positive", "map": "Positive"},
            {"label": "hcexp", "map": "HCEXP", "A": "variance"},  # fitted to each cell's data
        ],
        grid={"n_features": [4, 8, 16]},
        data={"source": "pairs", "n_pairs": 5, "dim": 3, "norm_x": 0.5, "norm_y": 0.7},
        trials=12,
        chunk_trials=12,
        seed=11,
    )
    kw.update(over)
    return st.Design(**kw)


def _count_cell_data(monkeypatch):
    """Count the calls of the kernel cell's data (the first thing its setup does)."""
    calls = []
    real = _eval_kernel.cell_data
    monkeypatch.setattr(_eval_kernel, "cell_data", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("chunk_trials", [12, 5])
def test_kernel_setup_runs_once_per_cell_in_a_serial_run(monkeypatch, chunk_trials):
    """One cell's data and fitted maps serve its unit(s) and its tables: one setup per cell and process
    (a one-unit cell used to set up twice, a cell of three units four times)."""
    design = kernel_design(chunk_trials=chunk_trials)
    calls = _count_cell_data(monkeypatch)
    res = st.run(design, rng=3)
    assert len(calls) == len(design.cells())
    monkeypatch.undo()
    pd.testing.assert_frame_equal(res.trials, st.run(design, rng=3).trials, check_exact=True)


def test_a_unit_answers_with_typed_messages():
    """A work unit is a UnitTask; it answers a UnitResult, whose tables are a cell's CellTables when the
    unit covers the whole cell, else the chunk's named parts."""
    from rfkit.study._cell import run_unit
    from rfkit.study._messages import CellTables, UnitResult, UnitTask

    design = kernel_design()
    task = UnitTask(design.to_dict(), cell=1, chunk=0, entropy=5, spawn_key=())
    res = run_unit(task)
    assert isinstance(res, UnitResult) and (res.cell, res.chunk) == (1, 0) and res.final
    assert isinstance(res.tables, CellTables) and res.tables.timings is None
    assert list(res.tables.as_parts()) == ["trials", "pairs"]
    assert set(res.tables.trials["cell"]) == {1}
    part = run_unit(dataclasses.replace(task, design=kernel_design(chunk_trials=5).to_dict(), chunk=2))
    assert not part.final and isinstance(part.tables, dict) and set(part.tables) == {"ratio", "status"}
    assert part.tables["ratio"].shape[1] == 2  # trials 10 and 11
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.cell = 2  # type: ignore[misc]


def test_every_kind_finalizes_with_one_signature():
    """Kernel, attention, concentration and drop-in cells are set up, evaluated and finalised through the
    same three calls (no adapters per kind)."""
    from rfkit.study._cell import KINDS

    assert set(KINDS) == {"kernel", "attention", "concentration", "drop-in"}
    for kind in KINDS.values():
        assert list(inspect.signature(kind.setup).parameters) == ["unit"]
        assert list(inspect.signature(kind.partial).parameters) == ["unit", "setup"]
        assert list(inspect.signature(kind.finalize).parameters) == ["unit", "setup", "parts"]


def test_run_plan_is_frozen_and_lists_every_unit(tmp_path):
    """Planning checks the arguments and lists the run's work units; it starts nothing and writes nothing."""
    from rfkit.study._plan import RunPlan, plan_run

    design = kernel_design(chunk_trials=5)
    plan = plan_run(design, rng=3, out=tmp_path / "out")
    assert isinstance(plan, RunPlan) and plan.design == design
    assert [(u.cell, u.chunk) for u in plan.units] == [(c, k) for c in range(3) for k in range(3)]
    assert plan.executor.name == "serial" and plan.options.on_error == "raise"
    assert not (tmp_path / "out").exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.out = None  # type: ignore[misc]


def test_a_finished_unit_recorded_without_its_pairs_is_recomputed(tmp_path):
    """A cell's recorded part files that lack one of its tables are damage: reported and recomputed (the
    tables equal an undamaged run's), never a KeyError."""
    design = kernel_design()
    out = tmp_path / "out"
    ref = st.run(design, rng=3, out=out, keep_parts=True)
    body = read_run_manifest(out / "run.json")
    files = body["units"]["1.0"]["files"]
    pairs = next(rel for rel in files if ".pairs." in rel)
    del files[pairs]
    write_run_manifest(out, {k: v for k, v in body.items() if k != "format"})
    with pytest.warns(DamagedResultWarning, match="no 'pairs' table"):
        res = st.run(design, rng=3, out=out, resume=True, keep_parts=True)
    assert res.provenance["units_resumed"] == 2 and len(res.provenance["repaired"]) == 1
    for name in ("trials", "pairs"):
        pd.testing.assert_frame_equal(getattr(res, name), getattr(ref, name), check_exact=True)
    assert "1.0" in json.loads((out / "run.json").read_text())["units"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedResultWarning)
        st.run(design, rng=3, out=out, resume=True)  # whole again
