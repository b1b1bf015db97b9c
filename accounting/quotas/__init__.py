"""Card-hour quotas: overflow between quotas, the burn forecast and run-out, and the warnings."""
