"""The agent's configuration: a TOML file (agents/contrib/agent.example.toml documents every key),
overridden by command-line flags, checked in one place.

A bad value raises :class:`ConfigError` naming the key and the rule (``sim.gpus: must be an integer
from 1 to 64 (got 0)``); the command line prints it and exits with code 2.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import socket
import time
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from agents.backends.gpu_models import MODELS, find_model

BACKENDS = ("nvml", "sim", "replay")
LOG_LEVELS = ("debug", "info", "warning", "error")
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def hash_token(token: str) -> str:
    """What ``token_sha256`` holds: the hex SHA-256 of the token (surrounding blanks ignored)."""
    return hashlib.sha256(token.strip().encode()).hexdigest()


class ConfigError(ValueError):
    """A configuration value broke a rule; the message names the key."""

    def __init__(self, key: str, rule: str, value: Any = None, *, show_value: bool = True) -> None:
        self.key = key
        super().__init__(f"{key}: {rule}" + (f" (got {value!r})" if show_value else ""))


@dataclass
class SimConfig:
    gpus: int = 8
    model: str = "H200"
    seed: int = 0
    speed: float = 1.0
    start: float | None = None  # epoch seconds; None = now
    mig: bool = False
    clock_offset_s: float = 0.0  # the fleet's --clock-offset: a node clock this far off (agents/clock.py)


@dataclass
class ReplayConfig:
    file: Path | None = None
    node: str = ""
    speed: float = 60.0
    start: float | str | None = "first"  # "first" = the file's first row for this node


@dataclass
class AgentConfig:
    """Everything one agent needs; see agents/contrib/agent.example.toml."""

    token_sha256: str
    backend: str = "nvml"
    listen_host: str = "127.0.0.1"
    listen_port: int = 9400
    interval_s: int = 10
    spool_path: Path = Path("/var/lib/cardhour-agent/spool.sqlite")
    spool_max_mib: float = 512.0
    spool_max_age_days: float = 7.0
    hostname: str = field(default_factory=socket.gethostname)
    log_level: str = "info"
    sim: SimConfig = field(default_factory=SimConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def speed(self) -> float:
        return {"sim": self.sim.speed, "replay": self.replay.speed}.get(self.backend, 1.0)


def load_config(
    path: str | Path | None, overrides: dict[str, Any] | None = None, *, clock_overrides: dict[str, Any] | None = None
) -> AgentConfig:
    """Read ``path`` (TOML; None = defaults only), apply ``overrides`` (dotted keys such as
    ``"interval_s"`` or ``"sim.gpus"``, from command-line flags) and ``clock_overrides`` (``speed``,
    ``start``: into the chosen backend's table), and validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as file:
                raw = tomllib.load(file)
        except OSError as error:
            raise ConfigError("--config", f"cannot read {path}: {error.strerror}", show_value=False) from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError("--config", f"{path} is not valid TOML: {error}", show_value=False) from None
    for dotted, value in (overrides or {}).items():
        table, _, key = dotted.rpartition(".")
        target = raw.setdefault(table, {}) if table else raw
        if not isinstance(target, dict):
            raise ConfigError(table, "must be a table", target)
        target[key] = value
    backend = raw.get("backend", "nvml")
    for key, value in (clock_overrides or {}).items():
        if backend not in ("sim", "replay"):
            raise ConfigError(key, "only the sim and replay backends run on an accelerated clock", value)
        table = raw.setdefault(backend, {})
        if isinstance(table, dict):
            table[key] = value
    return parse_config(raw)


def parse_config(raw: dict[str, Any]) -> AgentConfig:
    """Validate a configuration mapping (what TOML gives) into an AgentConfig."""
    raw = dict(raw)
    sim_raw, replay_raw = _table(raw, "sim"), _table(raw, "replay")
    _no_unknown(raw, "", {"backend", "listen", "token_sha256", "interval_s", "spool_path", "spool_max_mib",
                          "spool_max_age_days", "hostname", "log_level"})
    token = raw.get("token_sha256")
    if not isinstance(token, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", token.strip()):
        raise ConfigError(
            "token_sha256", "required: the hex SHA-256 of the node token (`python -m agents hash-token TOKEN`)",
            token,
        )
    config = AgentConfig(token_sha256=token.strip().lower())
    config.backend = _choice(raw, "backend", BACKENDS, config.backend)
    config.listen_host, config.listen_port = _listen(raw.get("listen", config.listen))
    config.interval_s = _int(raw, "interval_s", config.interval_s, 1, 3600)
    config.spool_path = Path(_text(raw, "spool_path", str(config.spool_path)))
    config.spool_max_mib = _number(raw, "spool_max_mib", config.spool_max_mib, above=0)
    config.spool_max_age_days = _number(raw, "spool_max_age_days", config.spool_max_age_days, above=0)
    config.hostname = _text(raw, "hostname", config.hostname)
    config.log_level = _choice(raw, "log_level", LOG_LEVELS, config.log_level)
    config.sim = _sim(sim_raw)
    config.replay = _replay(replay_raw, config)
    return config


def _sim(raw: dict[str, Any]) -> SimConfig:
    _no_unknown(raw, "sim.", {"gpus", "model", "seed", "speed", "start", "mig"})
    sim = SimConfig()
    sim.gpus = _int(raw, "gpus", sim.gpus, 1, 64, prefix="sim.")
    model = _text(raw, "model", sim.model, prefix="sim.")
    spec = find_model(model)
    if spec is None:
        raise ConfigError("sim.model", f"must be one of {', '.join(MODELS)} (or the full NVML name)", model)
    sim.model = spec.short_name
    sim.seed = _int(raw, "seed", sim.seed, 0, 2**63 - 1, prefix="sim.")
    sim.speed = _number(raw, "speed", sim.speed, at_least=1, prefix="sim.")
    start = parse_start(raw.get("start", "now"), "sim.start")
    if start == "first":
        raise ConfigError("sim.start", '"first" is for the replay backend only', start)
    sim.start = start
    sim.mig = raw.get("mig", sim.mig)
    if not isinstance(sim.mig, bool):
        raise ConfigError("sim.mig", "must be true or false", sim.mig)
    if sim.mig and not spec.mig_layout:
        raise ConfigError("sim.mig", f"{spec.name} has no MIG (use H200, H100 or A100)", sim.mig)
    return sim


def _replay(raw: dict[str, Any], config: AgentConfig) -> ReplayConfig:
    _no_unknown(raw, "replay.", {"file", "node", "speed", "start"})
    replay = ReplayConfig()
    if "file" in raw or config.backend == "replay":
        if "file" not in raw:
            raise ConfigError("replay.file", "required with backend = \"replay\": the samples CSV", show_value=False)
        replay.file = Path(_text(raw, "file", "", prefix="replay."))
        if config.backend == "replay" and not replay.file.is_file():
            raise ConfigError("replay.file", "must be an existing file", str(replay.file))
    replay.node = _text(raw, "node", config.hostname, prefix="replay.")
    replay.speed = _number(raw, "speed", replay.speed, at_least=1, prefix="replay.")
    replay.start = parse_start(raw.get("start", "first"), "replay.start")
    return replay


def parse_start(value: Any, key: str, *, now: float | None = None) -> float | str | None:
    """A clock start: ``"now"`` → None, ``"first"`` (replay), epoch seconds, an ISO-8601 time or
    TOML datetime with an offset, or a time relative to now such as ``"-2h"``, ``"-90m"``, ``"-3d"``."""
    now = time.time() if now is None else now
    rule = 'must be "now", epoch seconds, an ISO-8601 time with offset or a relative time like "-2h"'
    if isinstance(value, bool):
        raise ConfigError(key, rule, value)
    if isinstance(value, int | float):
        start = float(value)
    elif isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigError(key, "a datetime needs a UTC offset", value.isoformat())
        start = value.timestamp()
    elif isinstance(value, date):
        raise ConfigError(key, "a date needs a time and a UTC offset", value.isoformat())
    elif isinstance(value, str):
        text = value.strip()
        if text in ("now", "first"):
            return None if text == "now" else text
        relative = _RELATIVE.match(text)
        if relative:
            start = now - float(relative[1]) * _UNIT_S[relative[2]]
        elif re.fullmatch(r"\d+(\.\d+)?", text):
            start = float(text)
        else:
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                raise ConfigError(key, rule, value) from None
            if moment.tzinfo is None:
                raise ConfigError(key, "an ISO-8601 time needs a UTC offset", value)
            start = moment.timestamp()
    else:
        raise ConfigError(key, rule, value)
    if not math.isfinite(start) or start > now + 1:
        raise ConfigError(key, "must not be in the future", value)
    return start


# -- small checks ------------------------------------------------------------------------------


def _table(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.pop(name, {})
    if not isinstance(value, dict):
        raise ConfigError(name, "must be a table ([" + name + "])", value)
    return value


def _no_unknown(raw: dict[str, Any], prefix: str, known: set[str]) -> None:
    for key in raw:
        if key not in known:
            raise ConfigError(f"{prefix}{key}", f"unknown key (known: {', '.join(sorted(known))})", show_value=False)


def _choice(raw: dict[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = raw.get(key, default)
    if value not in choices:
        raise ConfigError(key, f"must be one of {', '.join(choices)}", value)
    return value


def _text(raw: dict[str, Any], key: str, default: str, *, prefix: str = "") -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(prefix + key, "must be a non-empty string", value)
    return value.strip()


def _int(raw: dict[str, Any], key: str, default: int, low: int, high: int, *, prefix: str = "") -> int:
    value = raw.get(key, default)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        value = int(value)  # a command-line flag
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(prefix + key, f"must be an integer from {low} to {high}", value)
    return value


def _number(
    raw: dict[str, Any], key: str, default: float, *, above: float | None = None, at_least: float | None = None,
    prefix: str = "",
) -> float:
    value = raw.get(key, default)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)  # a command-line flag
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and above is not None and not value > above:
        ok = False
    if ok and at_least is not None and not value >= at_least:
        ok = False
    if not ok:
        bound = f"greater than {above:g}" if above is not None else f"at least {at_least:g}"
        raise ConfigError(prefix + key, f"must be a number {bound}", value)
    return float(value)


def _listen(value: Any) -> tuple[str, int]:
    rule = 'must be "host:port" with a port from 1 to 65535 (e.g. "127.0.0.1:9400", "[::1]:9400")'
    if not isinstance(value, str):
        raise ConfigError("listen", rule, value)
    host, _, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError("listen", rule, value)
    return host, int(port)
