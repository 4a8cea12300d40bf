"""``benchmarks/device_hybrid.py``: refuses to run without its device, and its CPU mode runs end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from backend_marks import HAS_CUDA, needs_torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_hybrid.py"


def _run(*args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@needs_torch
@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_runs_nothing_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "hybrid.md"
    proc = _run("--out", str(out))
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "nothing was run" in proc.stderr
    assert not out.exists()


@needs_torch
def test_cpu_small_mode_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "hybrid.md"
    proc = _run("--device", "cpu", "--small", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    assert "40 of 40 cases pass" in text
    for name in ("exact SDPA (torch)", "RFA m=64", "Hybrid plain, window 16 + 4 sinks", "LSH"):
        assert name in text
    assert proc.stdout.count("PASS") == 40 and "FAIL" not in proc.stdout
