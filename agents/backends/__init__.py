"""Sources of GPU measurements behind the agents.records.Backend protocol: ``nvml`` (the real
GPUs), ``sim`` (a simulated node) and ``replay`` (a samples CSV played back)."""
