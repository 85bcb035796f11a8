"""``python -m broker.bench NAME [options]``: a benchmark without the ``broker`` command."""

from __future__ import annotations

import sys

from broker.bench import BENCHMARKS, main

if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
    sys.exit(f"usage: python -m broker.bench {{{','.join(BENCHMARKS)}}} [options]")
main(sys.argv[1], sys.argv[2:], prog=f"python -m broker.bench {sys.argv[1]}")
