"""Helpers for the agent tests: free ports, a real ``python -m agents`` subprocess with bounded
waits, authenticated GETs, and a Prometheus text-format checker."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.config import hash_token

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-node-token"
TOKEN_SHA256 = hash_token(TOKEN)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_port_run(count: int) -> int:
    """A base port with ``count`` consecutive free ports after it."""
    for _attempt in range(50):
        base = free_port()
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                probe = socket.socket()
                sockets.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in sockets:
                probe.close()
    raise RuntimeError("no run of free ports")


def http_get(url: str, *, token: str | None = TOKEN, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET; HTTP errors are returned, not raised."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def get_json(url: str, *, token: str | None = TOKEN) -> tuple[int, Any]:
    status, _headers, body = http_get(url, token=token)
    return status, json.loads(body)


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, step: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class AgentProcess:
    """A real ``python -m agents run`` child on a free localhost port."""

    def __init__(self, *args: str, spool: Path, port: int | None = None, hostname: str = "node-a") -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = TOKEN
        self.args = [
            "--listen", f"127.0.0.1:{self.port}", "--token-sha256", TOKEN_SHA256, "--spool", str(spool),
            "--hostname", hostname, "--log-level", "warning", *args,
        ]
        self.process: subprocess.Popen | None = None

    def start(self, *, timeout: float = 15.0) -> AgentProcess:
        self.log = open(os.devnull, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agents", "run", *self.args], cwd=ROOT, stdout=self.log,
            stderr=subprocess.PIPE,
        )
        wait_for(self._healthy, timeout=timeout, what="the agent's /healthz")
        return self

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the agent exited with {self.process.returncode}: {self.process.stderr.read().decode()}")
        try:
            status, body = get_json(f"{self.url}/healthz", token=self.token)
        except OSError:
            return False
        return status == 200 and body["ok"]

    def samples(self, after: int = 0, limit: int = 20000) -> dict[str, Any]:
        status, body = get_json(f"{self.url}/v1/samples?after={after}&limit={limit}")
        assert status == 200, body
        return body

    def wait_for_records(self, count: int, *, timeout: float = 15.0) -> None:
        """Until the spool has handed out at least ``count`` seqs (per /healthz)."""
        wait_for(lambda: get_json(f"{self.url}/healthz", token=self.token)[1]["last_seq"] >= count, timeout=timeout,
                 what=f"{count} records")

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self.log.close()

    def stop(self, *, timeout: float = 10.0) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL if it does not stop in time)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        self.log.close()
        self.process.stderr.close()
        return self.process.returncode

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()


_SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'(?:\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})?'
    r' (?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|NaN|[-+]?Inf))$'
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Parse Prometheus text format 0.0.4 strictly enough to catch mistakes: every sample line is
    well-formed, follows a ``# TYPE`` of its metric, and no metric is typed twice."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    types: dict[str, str] = {}
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("# HELP "):
            assert len(line.split(" ", 3)) >= 3, f"line {number}: bad HELP"
            continue
        if line.startswith("# TYPE "):
            _hash, _type, name, kind = line.split(" ")
            assert kind in ("gauge", "counter", "untyped", "histogram", "summary"), f"line {number}: {kind}"
            assert name not in types, f"line {number}: {name} typed twice"
            types[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"line {number} is not a sample: {line!r}"
        assert match["name"] in types, f"line {number}: {match['name']} has no TYPE before it"
        labels = dict(_LABEL.findall(match["labels"] or ""))
        series.setdefault(match["name"], []).append((labels, float(match["value"])))
    return series
