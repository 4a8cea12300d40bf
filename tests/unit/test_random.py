import numpy as np
import pytest

from rfkit._random import as_seed_sequence, check_rng, trial_seed_sequence
from rfkit.exceptions import InvalidParameterError


def test_int_seed_reproducible():
    assert check_rng(7).random() == check_rng(7).random()


def test_generator_passed_through_and_advances():
    g = np.random.default_rng(3)
    assert check_rng(g) is g
    a, b = check_rng(g).random(), check_rng(g).random()
    assert a != b


def test_seed_sequence_and_none():
    ss = np.random.SeedSequence(11)
    assert check_rng(ss).random() == np.random.default_rng(np.random.SeedSequence(11)).random()
    assert isinstance(check_rng(None), np.random.Generator)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.random.RandomState(0), "legacy numpy.random.RandomState"),
        (-1, "non-negative int"),
        (1.5, "Got 1.5 of type float"),
        (True, "Got True of type bool"),
        ("0", "Got '0' of type str"),
    ],
)
def test_refused(bad, match):
    with pytest.raises(InvalidParameterError, match=match):
        check_rng(bad)


def test_trial_streams_depend_only_on_cell_and_trial():
    root = as_seed_sequence(123)
    a = np.random.default_rng(trial_seed_sequence(root, 2, 5)).random(3)
    b = np.random.default_rng(trial_seed_sequence(as_seed_sequence(123), 2, 5)).random(3)
    c = np.random.default_rng(trial_seed_sequence(root, 5, 2)).random(3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_study_trial_streams_are_those_of_trial_seed_sequence():
    """The study runner draws trial t of cell c from trial_seed_sequence(root, c, t): one seeding function."""
    from rfkit.study._units import trial_streams

    root = np.random.SeedSequence(99, spawn_key=(4,))
    got = trial_streams(int(root.entropy), tuple(root.spawn_key), 3, range(2, 5))
    for t, ss in zip(range(2, 5), got):
        want = trial_seed_sequence(root, 3, t)
        assert ss.spawn_key == want.spawn_key == (4, 3, t)
        np.testing.assert_array_equal(ss.generate_state(4), want.generate_state(4))
