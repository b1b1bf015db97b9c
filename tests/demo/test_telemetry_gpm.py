"""The demo's minute rollups beyond the duty cycle (demo/telemetry.py, issue 16): SM activity below the duty
cycle on the Hopper GPUs only, and a hung pretraining run that spins (an even job number) at 99–100 % duty
cycle on a few SMs and idle power, so the board's "busy at idle power" and "shallow busy" have a story."""

from datetime import UTC, datetime

import pytest
from django.conf import settings

from cluster.models import Gpu, GpuModel, MinuteRollup, Node
from demo.telemetry import Stretch, insert_minutes
from demo.workloads import PRETRAIN, Profile

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
LO = int(START.timestamp()) // 60
RUN, TAIL = 120, 60  # minutes: a run whose last hour hangs


@pytest.fixture
def gpus():
    node = Node.objects.create(hostname="demo-gpm", pool="train")
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    return [Gpu.objects.create(node=node, index=index, uuid=f"GPU-demo-gpm-{index}", model=model,
                               memory_mib=model.memory_mib)
            for index, model in enumerate((h200, h200, l40s))]


def hung_run(gpu, seed):
    return Stretch(gpu.pk, LO, LO + RUN, Profile(PRETRAIN, 97.0, 0.9, idle_tail_minutes=TAIL), seed, LO, LO + RUN - TAIL)


def minutes(gpu, *, tail: bool):
    rows = MinuteRollup.objects.filter(gpu=gpu).order_by("bucket")
    return list(rows[RUN - TAIL:] if tail else rows[:RUN - TAIL])


def test_an_even_hung_run_spins_busy_on_few_sms_at_idle_power_and_an_odd_one_sits_idle(gpus):
    spinning, stalled, l40s = gpus
    insert_minutes(gpus, mig=set(), stretches=[hung_run(spinning, 42), hung_run(stalled, 43), hung_run(l40s, 44)],
                   start=START)
    floor = settings.CARDHOUR_IDLE_POWER_FLOOR_W["H200"]
    spin = minutes(spinning, tail=True)
    assert len(spin) == TAIL
    assert all(m.util_mean >= 99 for m in spin)
    assert all(m.power_mean_w < floor for m in spin)  # busy by duty cycle, idle by power
    assert all(m.sm_active_mean < settings.CARDHOUR_SHALLOW_SM_PCT for m in spin)  # and shallow
    assert all(m.mem_used_max_mib > settings.CARDHOUR_MEMORY_HELD_MIB for m in spin)
    assert all(m.util_mean < 5 for m in minutes(stalled, tail=True))  # idle: nothing to flag
    training = minutes(spinning, tail=False)
    assert all(m.power_mean_w > floor for m in training if m.util_mean > 90)
    assert all(m.sm_active_mean is not None and m.sm_active_mean <= m.util_mean for m in training)
    assert all(m.sm_active_mean is None and m.gpm_covered_s == 0 for m in MinuteRollup.objects.filter(gpu=l40s))
