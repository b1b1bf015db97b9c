"""The Cardhour node agent: samples GPUs (NVML, simulated or replayed), keeps the samples in a durable
SQLite spool and serves them over HTTP to the server's collector. Runs with no Django installed."""

__version__ = "0.1.0"
