"""Beat's collection shards go out longest-waiting first (issue 18's soak: in a fixed order, an overloaded
worker let the same last shards expire every round, and their nodes were never collected)."""

from datetime import timedelta

import pytest

from cluster.models import CollectionState, Node
from cluster.telemetry.selectors import collection_shards
from tests.conftest import T0

pytestmark = pytest.mark.django_db


def test_the_shard_that_waited_longest_goes_first_and_a_never_collected_node_before_all():
    nodes = [Node.objects.create(hostname=f"n{i}") for i in range(6)]
    ids = sorted(node.pk for node in nodes)
    for node_id in ids:
        CollectionState.objects.create(node_id=node_id, last_success_at=T0 - timedelta(seconds=node_id % 3))
    shards = collection_shards(ids, 3)
    assert sorted(node_id for shard in shards for node_id in shard) == ids  # every node once
    assert [shard[0] % 3 for shard in shards] == [2, 1, 0]  # oldest collection first
    assert all(len({node_id % 3 for node_id in shard}) == 1 for shard in shards)

    newest_shard = shards[-1]
    CollectionState.objects.filter(node_id=newest_shard[0]).update(last_success_at=None)  # never collected
    assert collection_shards(ids, 3)[0] == newest_shard


def test_more_shards_than_nodes_leaves_no_empty_shard():
    node = Node.objects.create(hostname="alone")
    assert collection_shards([node.pk], 8) == [[node.pk]]
