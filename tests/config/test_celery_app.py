import os
import subprocess
import sys

from config.embedded import BASE_DIR


def test_tasks_sent_from_a_django_process_use_cardhours_broker():
    code = (
        "import django; django.setup();"
        "from cluster.tasks import collect_nodes; print(collect_nodes.app.main, collect_nodes.app.conf.broker_url)"
    )
    env = {**os.environ, "REDIS_URL": "redis://broker.example:6390/3", "DJANGO_SETTINGS_MODULE": "config.settings"}
    result = subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cardhour", "redis://broker.example:6390/3"]
