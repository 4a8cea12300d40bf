"""Errors and warnings raised by rfkit.

Every error class also derives from the matching builtin exception, so generic
handlers keep working (scikit-learn's ``InvalidParameterError(ValueError,
TypeError)`` idea)::

    RFKitError(Exception)
    ├── InvalidParameterError(RFKitError, ValueError, TypeError)
    ├── ShapeError(RFKitError, ValueError)
    │   └── NotFittedError(ShapeError)
    ├── NonFiniteInputError(RFKitError, ValueError)
    ├── SingularMatrixError(RFKitError, numpy.linalg.LinAlgError)
    ├── NumericalOverflowError(RFKitError, FloatingPointError)
    ├── StudyError(RFKitError, RuntimeError)
    │   └── RunFolderError(StudyError)
    ├── ModelNotInstalledError(RFKitError, ImportError)
    ├── CorruptWeightsError(RFKitError, ValueError)
    ├── DrawFormatError(RFKitError, ValueError)
    ├── DataChecksumError(RFKitError, ValueError)
    ├── BackendError(RFKitError, TypeError)
    ├── BackendNotInstalledError(RFKitError, ImportError)
    └── MemoryLimitError(RFKitError, MemoryError)

    RFKitWarning(UserWarning)
    ├── IllConditionedWarning(RFKitWarning, RuntimeWarning)
    ├── NonPositiveNormalizerWarning(RFKitWarning, RuntimeWarning)
    ├── MonteCarloPrecisionWarning(RFKitWarning)
    ├── DegenerateInputWarning(RFKitWarning, RuntimeWarning)
    ├── DamagedResultWarning(RFKitWarning)
    ├── DamagedCacheWarning(RFKitWarning)
    ├── CacheNotWritableWarning(RFKitWarning)
    ├── OutOfDomainWarning(RFKitWarning)
    ├── VacuousBoundWarning(RFKitWarning)
    └── RFKitDeprecationWarning(RFKitWarning, DeprecationWarning)
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "RFKitError",
    "InvalidParameterError",
    "ShapeError",
    "NotFittedError",
    "NonFiniteInputError",
    "SingularMatrixError",
    "NumericalOverflowError",
    "StudyError",
    "RunFolderError",
    "ModelNotInstalledError",
    "CorruptWeightsError",
    "DrawFormatError",
    "DataChecksumError",
    "BackendError",
    "BackendNotInstalledError",
    "MemoryLimitError",
    "RFKitWarning",
    "IllConditionedWarning",
    "NonPositiveNormalizerWarning",
    "MonteCarloPrecisionWarning",
    "DegenerateInputWarning",
    "DamagedResultWarning",
    "DamagedCacheWarning",
    "CacheNotWritableWarning",
    "OutOfDomainWarning",
    "RFKitDeprecationWarning",
    "VacuousBoundWarning",
]


class RFKitError(Exception):
    """Base class of every error raised by rfkit."""


class InvalidParameterError(RFKitError, ValueError, TypeError):
    """A hyperparameter or option is outside its documented domain."""


class ShapeError(RFKitError, ValueError):
    """Array shapes or dimensions do not fit together."""


class NotFittedError(ShapeError):
    """A data-dependent feature map was sampled before its parameters were fitted.

    Raised by ``sample`` of a map whose parameters are a rule to resolve from data (OPRF's
    ``A=None``, CEXP's ``A="mean"``, ADERF, SDERF, GERF, SADERF ...): call
    ``fm.fit(Q, K)`` first, or pass ``data=(Q, K)`` to ``sample``. A :class:`ShapeError`
    (what rfkit raised here before), so existing handlers keep working.
    """


class NonFiniteInputError(RFKitError, ValueError):
    """An input array contains NaN or infinity."""


class SingularMatrixError(RFKitError, np.linalg.LinAlgError):
    """A matrix parameter is singular or outside the domain the estimator needs."""


class NumericalOverflowError(RFKitError, FloatingPointError):
    """Finite inputs produced a result that does not fit the floating-point type."""


class StudyError(RFKitError, RuntimeError):
    """A trial of a study failed; carries what is needed to replay it.

    Parameters
    ----------
    message : str
        What failed.
    cell, trial : int, optional
        Grid cell and trial index of the failed trial.
    spawn_key : tuple of int, optional
        ``SeedSequence`` spawn key of the failed trial.
    """

    def __init__(
        self,
        message: str,
        *,
        cell: int | None = None,
        trial: int | None = None,
        spawn_key: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.cell = cell
        self.trial = trial
        self.spawn_key = spawn_key


class RunFolderError(StudyError):
    """An output folder holds a run, or files no run wrote, and the call did not say what to do with it.

    Raised before anything is written. The message names the options that settle it in Python
    terms (``resume=True``, ``overwrite=True``); :meth:`worded` gives it in command-line terms
    (``--resume``, ``--overwrite``), which ``rfkit run`` prints (exit status 2, a usage error).

    Parameters
    ----------
    template : str
        The message, with ``{resume}`` and ``{overwrite}`` where an option is named.
    """

    _TERMS = {
        "python": {"resume": "resume=True", "overwrite": "overwrite=True"},
        "cli": {"resume": "--resume", "overwrite": "--overwrite"},
    }

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.worded("python"))

    def worded(self, terms: str = "python") -> str:
        """The message with the options spelt for ``terms``: ``"python"`` or ``"cli"``."""
        text = self.template
        for key, spelt in self._TERMS[terms].items():
            text = text.replace("{" + key + "}", spelt)
        return text


class ModelNotInstalledError(RFKitError, ImportError):
    """The package with pretrained weights (all-MiniLM-L6-v2) is not installed or incomplete."""


class CorruptWeightsError(RFKitError, ValueError):
    """A weights or vocabulary file does not match its expected hash or format."""


class DrawFormatError(RFKitError, ValueError):
    """A file given to ``rk.features.load_draw`` is not an rfkit draw, or has another format version."""


class DataChecksumError(RFKitError, ValueError):
    """A study's arrays (an ``.npz`` file, or arrays passed as ``data=``) differ from the SHA-256 recorded."""


class BackendError(RFKitError, TypeError):
    """Arrays of an unsupported library, of two libraries or on two devices in one call."""


class BackendNotInstalledError(RFKitError, ImportError):
    """The array library a backend needs (PyTorch, CuPy, ...) is not installed."""


class MemoryLimitError(RFKitError, MemoryError):
    """An allocation whose size follows from the arguments would exceed rfkit's memory limit.

    The size is estimated before anything is allocated; the limit is
    ``rfkit._params.max_bytes()`` (the environment variable ``RFKIT_MAX_BYTES``, default
    half of the physical memory). Raise the limit by setting ``RFKIT_MAX_BYTES`` (bytes, or
    with a suffix such as ``64G``), or reduce the sizes named in the message.
    """


class RFKitWarning(UserWarning):
    """Base class of every warning emitted by rfkit."""


class IllConditionedWarning(RFKitWarning, RuntimeWarning):
    """A matrix parameter is invertible but ill-conditioned."""


class NonPositiveNormalizerWarning(RFKitWarning, RuntimeWarning):
    """Some attention rows have a non-positive estimated normaliser."""


class MonteCarloPrecisionWarning(RFKitWarning):
    """The Monte Carlo standard error is too large for the requested comparison."""


class DegenerateInputWarning(RFKitWarning, RuntimeWarning):
    """Inputs are degenerate (e.g. all-zero rows) and results may be meaningless."""


class DamagedResultWarning(RFKitWarning):
    """A stored part of a study run failed verification (missing, truncated, altered) and is recomputed."""


class DamagedCacheWarning(RFKitWarning):
    """A cache entry (real-model extractions) is damaged; it is ignored and rebuilt.

    Damaged means: its arrays cannot be decoded, fail their checksum, or belong to another
    request (its stored key differs).

    A cache folder that merely cannot be read or written is not damage: see
    :class:`CacheNotWritableWarning`.
    """


class CacheNotWritableWarning(RFKitWarning):
    """A cache entry could not be written; the arrays are returned but computed again next time.

    The cause is a read-only or full folder, a denied permission, or a file where the folder
    should be; the message names the path and the OS error.
    """


class OutOfDomainWarning(RFKitWarning):
    """An approximate theory (the delta method of ratio estimators) is used outside its domain of validity.

    The prediction is still returned, flagged (``in_domain=False``); its neglected remainder is
    not small there, so it can be wrong by orders of magnitude.
    """


class VacuousBoundWarning(RFKitWarning):
    """A bound is no better than the trivial one, so it says nothing.

    For the relative RMS error bounds of :mod:`rfkit.theory.bounds` the trivial bound is 1: the
    estimate 0 has relative error exactly 1 at every pair, without any features. The result is
    still returned, flagged (``vacuous=True``).
    """


class RFKitDeprecationWarning(RFKitWarning, DeprecationWarning):
    """A name or extension hook kept for one release under its old spelling.

    The message names the new one. Code using the old name still works meanwhile.
    """
