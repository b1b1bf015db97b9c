"""MIG instances' shares from the inventory: a GPU instance's slices, split between its compute instances
by SM count, in whole ticks that never add up to more than the GPU."""

from fractions import Fraction

import pytest

from agents.backends.sim import SimBackend
from cluster.inventory.sync import inventory_apply, mig_shares
from cluster.models import Gpu, Node
from core.units import WHOLE_GPU_SHARE, share_from_fraction


def instance(gi_id, slices, sm_count=None, *, total=7, ci_id=0):
    return {"uuid": f"MIG-{gi_id}-{ci_id}", "gi_id": gi_id, "ci_id": ci_id, "slices": slices, "total_slices": total,
            "sm_count": sm_count}


def test_it_splits_a_gpu_instance_between_its_compute_instances_by_sm_count():
    # The H200 capture: 1c.3g (16 SMs) + 2c.3g (32 SMs) in GPU instance 2, then 2g + 1g + 1g.
    layout = [instance(2, 3, 16), instance(2, 3, 32, ci_id=1), instance(3, 2, 32), instance(9, 1, 16),
              instance(10, 1, 16)]
    assert mig_shares(layout) == [share_from_fraction(f) for f in ("1/7", "2/7", "2/7", "1/7", "1/7")]
    assert sum(mig_shares(layout)) == WHOLE_GPU_SHARE


def test_it_splits_equally_when_a_compute_instance_has_no_sm_count():
    assert mig_shares([instance(2, 3, 16), instance(2, 3, None, ci_id=1), instance(3, 2, 32)]) == [
        share_from_fraction(Fraction(3, 14)), share_from_fraction(Fraction(3, 14)), share_from_fraction("2/7")]
    assert mig_shares([instance(2, 3), instance(2, 3, ci_id=1)]) == [180_000, 180_000]


def test_its_whole_ticks_add_up_to_the_gpu_instance_and_never_to_more_than_the_gpu():
    # A 3g instance in three compute instances of 10 SMs each: a seventh of the GPU each.
    thirds = mig_shares([instance(2, 3, 10), instance(2, 3, 10, ci_id=1), instance(2, 3, 10, ci_id=2)])
    assert thirds == [120_000] * 3
    odd = mig_shares([instance(1, 1, 7, total=3), instance(1, 1, 11, total=3, ci_id=1)])
    assert sum(odd) == WHOLE_GPU_SHARE // 3 and odd == [108_889, 171_111]  # 280,000 by 7:11, rest to the larger remainder
    # A bogus inventory whose GPU instances claim more than the GPU is scaled down to it.
    greedy = mig_shares([instance(1, 7, 98), instance(2, 4, 56), instance(3, 3, 42)])
    assert sum(greedy) == WHOLE_GPU_SHARE and greedy[0] > greedy[1] > greedy[2]
    assert mig_shares([{"uuid": "MIG-x", "gi_id": None}]) == [120_000]  # slices unknown: a seventh


@pytest.mark.django_db
def test_inventory_apply_gives_the_h200s_compute_instances_a_third_and_two_thirds_of_their_gpu_instance():
    node = Node.objects.create(hostname="gpu-h200-01", pool="train")
    inventory = SimBackend(hostname=node.hostname, gpus=2, model="H200", mig=True).inventory()
    assert inventory_apply(node, inventory)["added"] == 2 + 5
    parent = Gpu.objects.get(uuid=inventory["gpus"][0]["uuid"])
    shares = {(g.mig_profile, g.memory_mib): g.share for g in Gpu.objects.filter(mig_parent=parent)}
    gi_share = share_from_fraction("3/7")
    assert shares == {
        ("1c.3g.71gb", 71424): gi_share // 3, ("2c.3g.71gb", 71424): gi_share * 2 // 3,
        ("2g.35gb", 33280): share_from_fraction("2/7"), ("1g.18gb", 16384): share_from_fraction("1/7"),
    }
    assert sum(Gpu.objects.filter(mig_parent=parent).values_list("share", flat=True)) == WHOLE_GPU_SHARE
    # An agent that does not report SM counts: the GPU instance is split equally, as before.
    for gpu in inventory["gpus"]:
        for mig in gpu["mig_instances"]:
            del mig["sm_count"]
    inventory_apply(node, inventory)
    split = Gpu.objects.filter(mig_parent=parent, mig_profile__endswith="3g.71gb").values_list("share", flat=True)
    assert sorted(split) == [gi_share // 2] * 2
