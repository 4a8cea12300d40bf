"""Collection rules for the whole repository (tests/ and the package's doctests).

rfkit.nn needs PyTorch, an optional extra: where it is not installed, its modules are not
collected for doctests (importing them raises BackendNotInstalledError by design).
"""

from __future__ import annotations

import importlib.util

collect_ignore = [] if importlib.util.find_spec("torch") is not None else ["rfkit/nn"]
# the example study of docs/bring-your-own.md (package data, imported as `rescaled` from its own folder)
collect_ignore.append("rfkit/studies")
