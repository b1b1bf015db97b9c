"""The agent imports and runs where Django is not installed."""

import signal
import subprocess
import sys

from tests.agents.agent_helpers import ROOT, TOKEN_SHA256, free_port, get_json, wait_for

BLOCK_DJANGO = "import sys; sys.modules['django'] = None; sys.modules['rest_framework'] = None; "


def test_it_imports_every_module_without_django():
    modules = ("agents.__main__", "agents.agent", "agents.spool", "agents.http", "agents.sampler", "agents.clock",
               "agents.config", "agents.fleet", "agents.metrics", "bench.agent", "agents.backends.sim",
               "agents.backends.replay", "agents.backends.sim_workloads", "agents.backends.gpu_models")
    code = BLOCK_DJANGO + "; ".join(f"import {m}" for m in modules) + "; print('imported')"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"


def test_it_runs_without_django(tmp_path):
    """``python -m agents run`` with Django made unimportable: it starts, samples, serves and stops."""
    port = free_port()
    argv = ["agents", "run", "--backend", "sim", "--gpus", "2", "--speed", "600", "--start=-2m",
            "--listen", f"127.0.0.1:{port}", "--token-sha256", TOKEN_SHA256, "--spool", str(tmp_path / "s.sqlite")]
    code = BLOCK_DJANGO + f"import runpy; sys.argv = {argv!r}; runpy.run_module('agents', run_name='__main__')"
    agent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)

    def sampled():
        assert agent.poll() is None, agent.stderr.read()
        try:
            return get_json(f"http://127.0.0.1:{port}/v1/samples?after=0")[1]["records"]
        except OSError:
            return False

    try:
        assert wait_for(sampled, timeout=15, what="samples from the Django-less agent")
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=15)
    assert agent.returncode == 0, err
