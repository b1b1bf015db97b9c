"""The benchmarks (floor 8): ``make bench`` / ``python -m bench``, each figure beside a baseline from the
same run. Nothing imports it."""
