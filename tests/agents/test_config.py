"""Configuration: TOML plus flag overrides; a bad value names its key and rule (exit code 2)."""

import hashlib
import socket
import subprocess
import sys
import time

import pytest

from agents.__main__ import main
from agents.config import ConfigError, hash_token, load_config, parse_config, parse_start
from tests.agents.agent_helpers import ROOT, TOKEN_SHA256

EXAMPLE = ROOT / "agents" / "contrib" / "agent.example.toml"


def test_the_example_config_is_valid_and_documents_every_key():
    config = load_config(EXAMPLE)
    assert (config.backend, config.listen, config.interval_s, config.spool_max_mib) == ("nvml", "127.0.0.1:9400", 10, 512)
    text = EXAMPLE.read_text()
    for key in ("backend", "listen", "token_sha256", "interval_s", "spool_path", "spool_max_mib",
                "spool_max_age_days", "hostname", "log_level", "[sim]", "gpus", "model", "seed", "speed", "start",
                "mig", "[replay]", "file", "node"):
        assert key in text, key


def test_it_reads_toml_and_lets_flags_override(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text(f'backend = "sim"\ntoken_sha256 = "{TOKEN_SHA256.upper()}"\ninterval_s = 30\n'
                    '[sim]\ngpus = 4\nmodel = "NVIDIA L40S"\nspeed = 5\nstart = "-2h"\n')
    config = load_config(path, {"interval_s": "15", "sim.gpus": "2"}, clock_overrides={"speed": "20"})
    assert config.token_sha256 == TOKEN_SHA256
    assert (config.interval_s, config.sim.gpus, config.sim.model, config.speed) == (15, 2, "L40S", 20.0)
    assert time.time() - 7200 - 5 < config.sim.start < time.time() - 7200 + 5


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "token_sha256: required"),
        ({"token_sha256": "abc"}, "token_sha256: required: the hex SHA-256"),
        ({"backend": "cuda"}, "backend: must be one of nvml, sim, replay (got 'cuda')"),
        ({"listen": "9400"}, 'listen: must be "host:port"'),
        ({"listen": "127.0.0.1:70000"}, 'listen: must be "host:port"'),
        ({"interval_s": 0}, "interval_s: must be an integer from 1 to 3600 (got 0)"),
        ({"interval_s": 2.5}, "interval_s: must be an integer from 1 to 3600"),
        ({"interval_s": True}, "interval_s: must be an integer"),
        ({"spool_max_mib": -1}, "spool_max_mib: must be a number greater than 0"),
        ({"spool_max_age_days": "week"}, "spool_max_age_days: must be a number greater than 0"),
        ({"hostname": ""}, "hostname: must be a non-empty string"),
        ({"colour": "blue"}, "colour: unknown key"),
        ({"sim": {"gpus": 65}}, "sim.gpus: must be an integer from 1 to 64 (got 65)"),
        ({"sim": {"model": "V100"}}, "sim.model: must be one of H200, H100, A100, L40S"),
        ({"sim": {"speed": 0.5}}, "sim.speed: must be a number at least 1"),
        ({"sim": {"start": "yesterday"}}, "sim.start: must be"),
        ({"sim": {"start": "2026-01-01T00:00:00"}}, "sim.start: an ISO-8601 time needs a UTC offset"),
        ({"sim": {"start": "first"}}, 'sim.start: "first" is for the replay backend only'),
        ({"sim": {"mig": "yes"}}, "sim.mig: must be true or false"),
        ({"sim": {"model": "L40S", "mig": True}}, "sim.mig: NVIDIA L40S has no MIG"),
        ({"sim": {"gpu": 8}}, "sim.gpu: unknown key"),
        ({"sim": 3}, "sim: must be a table"),
        ({"backend": "replay"}, "replay.file: required with backend"),
        ({"backend": "replay", "replay": {"file": "/nonexistent.csv"}}, "replay.file: must be an existing file"),
        ({"replay": {"speed": 0}}, "replay.speed: must be a number at least 1"),
    ],
)
def test_a_bad_value_names_its_key_and_rule(raw, message):
    raw = {"token_sha256": TOKEN_SHA256, **raw} if "token_sha256" not in str(message) else raw
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert str(error.value).startswith(message), str(error.value)


def test_it_refuses_an_accelerated_clock_for_nvml():
    with pytest.raises(ConfigError, match="speed: only the sim and replay backends"):
        load_config(None, {"token_sha256": TOKEN_SHA256}, clock_overrides={"speed": "10"})


def test_it_parses_clock_starts():
    now = 1_800_000_000.0
    assert parse_start("now", "k", now=now) is None
    assert parse_start("first", "k", now=now) == "first"
    assert parse_start("-90m", "k", now=now) == now - 5400
    assert parse_start("-3d", "k", now=now) == now - 3 * 86400
    assert parse_start(1_700_000_000, "k", now=now) == 1_700_000_000.0
    assert parse_start("1700000000", "k", now=now) == 1_700_000_000.0
    assert parse_start("2026-11-02T08:00:00+08:00", "k", now=now) == 1_793_577_600.0
    with pytest.raises(ConfigError, match="k: must not be in the future"):
        parse_start(now + 3600, "k", now=now)


def test_a_bad_config_file_exits_2_naming_the_key(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text(f'backend = "sim"\ntoken_sha256 = "{TOKEN_SHA256}"\n[sim]\ngpus = 0\n')
    result = subprocess.run([sys.executable, "-m", "agents", "run", "--config", str(path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "sim.gpus: must be an integer from 1 to 64 (got 0)" in result.stderr


def test_a_bad_flag_is_reported_with_the_flag(tmp_path, capsys):
    code = main(["run", "--backend", "sim", "--token-sha256", TOKEN_SHA256, "--interval", "0",
                 "--spool", str(tmp_path / "s.sqlite")])
    assert code == 2
    assert "interval_s: must be an integer from 1 to 3600 (got 0) [from --interval]" in capsys.readouterr().err


def test_an_unwritable_spool_or_a_busy_port_is_a_config_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["run", "--backend", "sim", "--token-sha256", TOKEN_SHA256, "--spool", str(blocker / "s.sqlite")])
    assert code == 2 and "spool_path: cannot open the spool" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = main(["run", "--backend", "sim", "--token-sha256", TOKEN_SHA256, "--spool", str(tmp_path / "s.sqlite"),
                     "--listen", f"127.0.0.1:{busy.getsockname()[1]}"])
    assert code == 2 and "listen: cannot listen on 127.0.0.1:" in capsys.readouterr().err


def test_a_broken_toml_file_is_reported(tmp_path, capsys):
    path = tmp_path / "agent.toml"
    path.write_text("backend = \n")
    assert main(["run", "--config", str(path)]) == 2
    assert "--config: " in capsys.readouterr().err


def test_hash_token_prints_the_config_line(capsys, monkeypatch):
    assert main(["hash-token", "s3cret"]) == 0
    assert capsys.readouterr().out == f'token_sha256 = "{hash_token("s3cret")}"\n'
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("s3cret\n"))
    assert main(["hash-token", "-"]) == 0
    assert capsys.readouterr().out == f'token_sha256 = "{hash_token("s3cret")}"\n'
    assert hash_token(" s3cret\n") == hashlib.sha256(b"s3cret").hexdigest()


def test_help_explains_every_run_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--config", "--backend", "--listen", "--interval", "--spool", "--speed", "--start", "--token-sha256",
                 "--gpus", "--model", "--seed", "--mig", "--replay-file", "--replay-node", "--hostname"):
        assert flag in text
