"""``make chaos``: the fault scenarios of issue 17, scripted against real processes (``python -m chaos``)."""
