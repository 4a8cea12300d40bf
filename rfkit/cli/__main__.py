"""``python -m rfkit.cli``: the ``rfkit`` command."""

import sys

from . import main

sys.exit(main())
