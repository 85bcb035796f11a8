"""``python -m broker.cli``: the ``broker`` command without the console script."""

from __future__ import annotations

import sys

from broker.cli import main

sys.exit(main())
