"""Smoke test of the benchmark entry point (``make bench``): a quick run writes its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_script(name: str, *args: str) -> None:
    """Run ``benchmarks/<name>`` with ``args`` from the repository root; it must succeed."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_run_all_quick_writes_markdown_and_json(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    _run_script("run_all.py", "--quick", "--no-peers", "--out", str(out))
    md = (out / "bench.md").read_text()
    data = json.loads((out / "bench.json").read_text())
    assert "# rfkit benchmarks" in md and "## Targets" in md
    assert data["config"]["quick"] is True
    assert data["peers"] == {"skipped": "--no-peers"}
    names = {r["name"] for r in data["rfkit"]}
    assert {"RFA Positive", "RFA Positive causal", "exact softmax", "SNIS S=256"} <= names
    for row in data["rfkit"]:
        assert row["median_s"] > 0 and row["floor_s"] > 0 and row["peak_mib"] >= 0
    assert data["limits"]["gemm"] and data["limits"]["elementwise_block"]
    assert data["targets"]
    assert "## Scaling benchmarks" in md and "## Threads" in md
    threads = data["scale"]["threads"]["rows"]
    assert {r["threads"] for r in threads} >= {1} and all(
        r["bit_identical_to_default_threads"] for r in threads
    )


def _bench_studies(tmp_path: Path, *args: str) -> dict:
    """Run ``benchmarks/bench_studies.py`` on deterministic-maps into ``tmp_path``; its JSON record."""
    _run_script("bench_studies.py", "deterministic-maps", *args, "--out", str(tmp_path))
    return json.loads((tmp_path / "studies.json").read_text())


def test_bench_studies_times_a_study_and_writes_its_table(tmp_path: Path) -> None:
    """``make bench-studies``: one quick run of one study, a Markdown table and a JSON record."""
    data = _bench_studies(tmp_path, "--repeats", "1", "--label", "smoke")
    (row,) = data["smoke"]["rows"]
    assert row["study"] == "deterministic-maps" and row["profile"] == "quick" and row["runs"] == 1
    assert row["median"] > 0
    assert "| deterministic-maps | quick |" in (tmp_path / "studies.md").read_text()


def test_bench_studies_alternates_two_checkouts(tmp_path: Path) -> None:
    """``--before``: both checkouts timed alternately, each under its own label, each naming the other."""
    data = _bench_studies(
        tmp_path, "--repeats", "2", "--before", str(ROOT), "--before-label", "a", "--label", "b"
    )
    assert data["a"]["alternated_with"] == "b" and data["b"]["alternated_with"] == "a"
    assert [r["runs"] for r in data["a"]["rows"] + data["b"]["rows"]] == [2, 2]
    assert "timed alternately with *b*" in (tmp_path / "studies.md").read_text()


def test_pool_scaling_quick_writes_its_table_and_every_row_is_bit_identical(tmp_path: Path) -> None:
    out = tmp_path / "pool"
    _run_script("bench_pool_scaling.py", "--quick", "--threads", "1,2", "--repeats", "1", "--out", str(out))
    data = json.loads((out / "pool-scaling.json").read_text())
    rows = data["rows"]
    assert {r["threads"] for r in rows} == {1, 2} and len(rows) == 8
    assert all(r["bit_identical_to_first"] and r["ms"] > 0 for r in rows)
    assert "| case | threads | ms |" in (out / "pool-scaling.md").read_text()


def test_rfa_breakdown_needs_no_private_alias_kept_for_it() -> None:
    """The step-by-step RFA timing uses the featurizer's ``logits`` and ``with_ones`` themselves."""
    code = (
        "import sys\n"
        "sys.path.insert(0, 'benchmarks')\n"
        "from rfkit.attention import _rfa\n"
        "for owner, name in ((_rfa._Featurizer, '_logits'), (_rfa, '_with_ones')):\n"
        "    if hasattr(owner, name):\n"
        "        delattr(owner, name)\n"
        "from _breakdown import rfa_breakdown\n"
        "out = rfa_breakdown(256, 1)\n"
        "assert 'skipped' not in out, out\n"
        "assert out['steps_s']['key projection (GEMM)'] > 0 and out['rfa_call_s'] > 0, out\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
