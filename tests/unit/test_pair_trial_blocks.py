"""Paired estimates of batched draws in fixed blocks of trials (RandomMaclaurin, TensorSketch, GERF trig).

These maps compute the paired estimates of all trials at once in large arrays; a batched draw
runs them in blocks of trials on rfkit's thread pool. Every block must give its trials' numbers
as the whole batch does (to round-off), for any block size and thread count, and equal each
trial's own draw.
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
from rfkit import _backend
from rfkit.features import GERF, RandomMaclaurin, TensorSketch

rng = np.random.default_rng(31)
X, Y = 0.4 * rng.standard_normal((2, 2, 9, 5))  # a lead axis: pairs (2, 9)
STREAMS = [np.random.SeedSequence(7, spawn_key=(0, t)) for t in range(11)]

MAPS = {
    "random-maclaurin": lambda: RandomMaclaurin(24),
    "tensorsketch": lambda: TensorSketch(16, degree=3),
    "gerf-trig": lambda: GERF(12, s=-1, projection="orthogonal").fit(X, Y),
}


def _whole(draw):
    """The estimates of the whole batch in one computation (the blocks bypassed)."""
    return draw._slog_pairwise(X, Y)


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("budget", [1, 40, 300])
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_trial_blocks_equal_the_whole_batch_and_each_trial(monkeypatch, name, budget, n_threads):
    draw = MAPS[name]().sample_streams(5, STREAMS)
    want_sign, want_log = _whole(draw)
    monkeypatch.setattr(_backend.Backend, "row_block_elems", property(lambda self: budget))
    blocks = []
    real = draw._trials
    monkeypatch.setattr(draw, "_trials", lambda ts: blocks.append(ts) or real(ts))
    with rk.threads(n_threads):
        sign, logabs = draw.slog_pairwise(X, Y)
    assert len(blocks) > 1  # the blocks were used
    assert sorted((b.start, b.stop) for b in blocks)[0][0] == 0 and max(b.stop for b in blocks) == len(
        STREAMS
    )
    np.testing.assert_array_equal(sign, want_sign)
    # the same steps on fewer trials: equal to round-off (a product or FFT over fewer rows may
    # group its arithmetic differently; bit-identical on these shapes with OpenBLAS)
    np.testing.assert_allclose(logabs, want_log, rtol=1e-13, atol=1e-13)
    assert sign.shape == logabs.shape == (len(STREAMS), 2, 9)
    for t in (0, 4, 10):  # a trial's estimates are those of its own draw, to round-off
        own_sign, own_log = MAPS[name]().sample_streams(5, STREAMS[t : t + 1]).slog_pairwise(X, Y)
        np.testing.assert_array_equal(sign[t], own_sign[0])
        np.testing.assert_allclose(logabs[t], own_log[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(MAPS))
def test_a_trial_block_is_the_draw_of_those_trials(name):
    """``_trials`` slices every per-trial array: the block's draw computes what those trials' draw does."""
    draw = MAPS[name]().sample_streams(5, STREAMS)
    part = draw._trials(slice(3, 7))
    assert part.n_draws == 4 and draw.n_draws == len(STREAMS)
    sign, logabs = part._slog_pairwise(X, Y)
    want_sign, want_log = MAPS[name]().sample_streams(5, STREAMS[3:7])._slog_pairwise(X, Y)
    np.testing.assert_array_equal(sign, want_sign)
    np.testing.assert_allclose(logabs, want_log, rtol=1e-12, atol=1e-12)
    assert part._params is not draw._params  # a parameter cache of its own (its arrays are sliced)
