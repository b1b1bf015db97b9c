"""The first inventory sync of two nodes at once: one GPU model row, no unique-name error."""

import threading

import pytest
from django.db import connection, transaction

from cluster.inventory.sync import gpu_model_for, inventory_apply
from cluster.models import Gpu, GpuModel, Node

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "NVIDIA H200 NVL"


def inventory(host: str) -> dict:
    return {"gpus": [{"index": i, "uuid": f"GPU-{host}-{i}", "name": NAME, "memory_mib": 143771} for i in range(2)]}


def test_a_second_sync_waits_for_the_first_and_uses_its_model():
    """Node A's sync has inserted the new model but not committed when node B's sync meets the name:
    B waits on the insert and then reads A's row, instead of failing on cluster_gpumodel_name_key."""
    node_a = Node.objects.create(hostname="h200nvl-a", pool="train")
    node_b = Node.objects.create(hostname="h200nvl-b", pool="train")
    inserted, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    result = {}

    def sync_a():
        try:
            with transaction.atomic():
                inventory_apply(node_a, inventory(node_a.hostname))
                inserted.set()
                release.wait(30)
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    def sync_b():
        try:
            result["counts"] = inventory_apply(node_b, inventory(node_b.hostname))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    first = threading.Thread(target=sync_a)
    first.start()
    assert inserted.wait(30)
    second = threading.Thread(target=sync_b)
    second.start()
    second.join(1)
    assert second.is_alive()  # waiting on A's uncommitted insert of the name
    release.set()
    first.join(30)
    second.join(30)
    assert not errors
    assert result["counts"] == {"added": 2, "updated": 0, "missing": 0}
    model = GpuModel.objects.get(name=NAME)
    assert set(Gpu.objects.values_list("model_id", flat=True)) == {model.pk}
    assert Gpu.objects.filter(node__in=[node_a, node_b]).count() == 4


def test_many_first_syncs_at_once_make_one_model():
    nodes = [Node.objects.create(hostname=f"h200nvl-{i}", pool="train") for i in range(6)]
    barrier = threading.Barrier(len(nodes))
    errors: list[BaseException] = []

    def sync(node):
        try:
            barrier.wait(30)
            inventory_apply(node, inventory(node.hostname))
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=sync, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert GpuModel.objects.filter(name=NAME).count() == 1
    assert Gpu.objects.count() == 12


def test_a_taken_short_name_gets_the_next_free_one():
    GpuModel.objects.create(name="NVIDIA H200 (lab)", short_name="H200", memory_mib=1)
    model = gpu_model_for("NVIDIA H200 NVL", 143771)
    assert (model.short_name, model.memory_mib) == ("H200-2", 143771)
    assert gpu_model_for("NVIDIA H200 NVL", None) == model
