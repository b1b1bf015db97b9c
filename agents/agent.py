"""One running agent: a backend, its spool, the sampler thread and the HTTP server thread.
``python -m agents run`` runs one; ``python -m agents fleet`` runs several in one process.

Where a restarted agent resumes: an accelerated clock starts at the configured start or at the
newest spooled record, whichever is later, and the sampler continues after that record
(agents/sampler.py), so a restart neither repeats records nor leaves a hole in a simulation.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import threading
import time
from typing import Any

import agents
from agents.backends.replay import ReplayBackend
from agents.backends.sim import SimBackend
from agents.clock import Clock, SkewedClock, make_clock
from agents.config import AgentConfig, ConfigError
from agents.http import make_server
from agents.metrics import Telemetry
from agents.records import Backend
from agents.sampler import Sampler, resume_after
from agents.spool import Spool

log = logging.getLogger(__name__)


def make_backend(config: AgentConfig) -> Backend:
    """The configured backend. nvml is imported only when chosen: sim and replay agents need no
    NVIDIA library."""
    if config.backend == "sim":
        sim = config.sim
        return SimBackend(hostname=config.hostname, gpus=sim.gpus, model=sim.model, seed=sim.seed, mig=sim.mig)
    if config.backend == "replay":
        try:
            return ReplayBackend(path=config.replay.file, node=config.replay.node, interval_s=config.interval_s)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise ConfigError("replay.file", str(error), show_value=False) from None
    from agents.backends.nvml import NvmlBackend  # agents/backends/nvml.py (written separately)

    return NvmlBackend(hostname=config.hostname)


class Agent:
    """Build with a validated config (raises ConfigError for a spool or listen address that cannot be
    opened), then :meth:`start` and, when done, :meth:`stop`. ``stop_event`` may be shared (the
    fleet stops all its agents with one)."""

    def __init__(self, config: AgentConfig, *, backend: Backend | None = None,
                 stop_event: threading.Event | None = None) -> None:
        self.config = config
        self.token_sha256 = config.token_sha256
        self.stop_event = stop_event or threading.Event()
        self.failed = False
        self.backend = backend or make_backend(config)
        self.spool = self._open_spool()
        self.clock = self._make_clock()
        self.telemetry = Telemetry(hostname=config.hostname)
        self._inventory_lock = threading.Lock()
        self.inventory()
        self.sampler = Sampler(
            backend=self.backend, spool=self.spool, clock=self.clock, interval_s=config.interval_s,
            after_ts=resume_after(clock_start=self.clock.start, spool_last_ts=self.spool.last_ts()),
            stop=self.stop_event, on_store=self.telemetry.update,
        )
        try:
            self.server = make_server(self, config.listen_host, config.listen_port)
        except OSError as error:
            self.spool.close()
            raise ConfigError("listen", f"cannot listen on {config.listen}: {error.strerror}", show_value=False) from None
        self._threads: list[threading.Thread] = []
        self._serving = False

    def _open_spool(self) -> Spool:
        path = self.config.spool_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return Spool(
                path, max_bytes=int(self.config.spool_max_mib * 1024 * 1024),
                max_age_s=self.config.spool_max_age_days * 86400,
            )
        except (OSError, sqlite3.Error) as error:
            raise ConfigError("spool_path", f"cannot open the spool {path}: {error}", show_value=False) from None

    def _make_clock(self) -> Clock:
        config = self.config
        start: Any = {"sim": config.sim.start, "replay": config.replay.start}.get(config.backend)
        if start == "first":
            start = self.backend.first_ts()
            if start is None:
                raise ConfigError("replay.node", f"no rows for node {config.replay.node!r} in {config.replay.file}",
                                  show_value=False)
        last_ts = self.spool.last_ts()
        if start is not None and last_ts is not None:
            start = max(start, last_ts)  # resume a simulation where the spool left off
        clock = make_clock(start=start, speed=config.speed)
        offset = config.sim.clock_offset_s if config.backend == "sim" else 0.0
        return SkewedClock(clock, offset_s=offset) if offset else clock

    # -- running ------------------------------------------------------------------------------

    def start(self, *, serve: bool = True) -> None:
        """Start sampling and, with ``serve``, serving in a thread of its own (a fleet serves all its agents'
        servers from one thread instead: ``agents.http.serve_all``)."""
        name = self.config.hostname
        self._threads = [threading.Thread(target=self._run_sampler, name=f"sampler-{name}", daemon=True)]
        self._serving = serve
        if serve:
            self._threads.append(threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                                  name=f"http-{name}", daemon=True))
        for thread in self._threads:
            thread.start()
        log.info("agent %s (%s backend) listening on %s, spool %s (id %s)", name, self.config.backend,
                 self.config.listen, self.config.spool_path, self.spool.spool_id)

    def _run_sampler(self) -> None:
        try:
            self.sampler.run()
        except Exception:
            # A bug, not a backend hiccup (those are caught inside): stop the agent so that its
            # supervisor (systemd's Restart=always) starts a fresh one.
            log.exception("the sampler of %s stopped", self.config.hostname)
            self.failed = True
            self.stop_event.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop sampling and serving, wait for the sampler's last batch, close the spool."""
        self.stop_event.set()
        if self._threads and self._serving:
            self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            thread.join(timeout)
        self.spool.close()
        self.backend.close()

    # -- what the HTTP endpoint reads ---------------------------------------------------------

    def agent_time(self) -> float:
        return self.clock.now()

    def health(self) -> tuple[bool, dict[str, Any]]:
        running = bool(self._threads) and self._threads[0].is_alive()
        stats = self.spool.stats()
        return running, {
            "ok": running, "agent_version": agents.__version__, "backend": self.config.backend,
            "spool_id": self.spool.spool_id, "last_seq": stats["last_seq"],
            "last_record_ts": stats["last_ts"] or None, "agent_time": self.clock.now(),
        }

    def inventory(self) -> dict[str, Any]:
        with self._inventory_lock:
            inventory = self.backend.inventory()
        self.telemetry.set_inventory(inventory)
        return inventory

    def metrics_text(self) -> str:
        return self.telemetry.render(
            spool_stats=self.spool.stats(), sampler_errors=self.sampler.errors,
            info={"version": agents.__version__, "backend": self.config.backend},
        )


def configure_logging(level: str) -> None:
    """Log lines to stderr (the journal under systemd), times in UTC like the records."""
    logging.basicConfig(level=level.upper(), format="%(asctime)sZ %(levelname)s %(name)s: %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S")
    logging.Formatter.converter = time.gmtime


def wait_for_signal(stop: threading.Event) -> None:
    """Set ``stop`` on SIGTERM or SIGINT and block until it is set (by a signal or a failed sampler).
    Call from the main thread (Python delivers signals there)."""

    def handler(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop.wait(1.0):
        pass
