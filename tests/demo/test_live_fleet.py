"""`make demo`'s live simulated fleet (config/launcher.py → agents/fleet.py) is the demo data set's cluster:
the same nodes on the ports load_demo gives them, MIG where the demo has it, and no workload on the nodes
the demo puts in maintenance (the agent knows no Django: the launcher says which on its command line)."""

import argparse
from datetime import UTC, datetime

import pytest
import time_machine

from agents.backends.sim import SimBackend
from agents.fleet import add_fleet_arguments, plan_fleet
from cluster.choices import NodeStatus
from cluster.inventory.sync import inventory_apply
from cluster.models import Gpu, Node
from config.launcher import fleet_arguments
from demo.cluster import GPUS_PER_NODE, MIG_NODE, load_demo

NOW = datetime(2026, 11, 4, 4, 0, tzinfo=UTC)  # a Wednesday, noon in Shanghai


def launcher_fleet():
    parser = argparse.ArgumentParser()
    add_fleet_arguments(parser)
    command, *rest = fleet_arguments(agent_port=9400, tokens="tokens.json", spools="spools", backfill="-6h")
    assert command == "fleet"
    args = parser.parse_args(rest)
    plan = plan_fleet(nodes=args.nodes, models=args.models, base_port=args.base_port, prefix=args.hostname_prefix,
                      mig=args.mig, maintenance=args.maintenance)
    return args, plan


@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)
def test_the_launchers_fleet_is_the_demo_cluster_and_runs_nothing_on_its_node_in_maintenance():
    load_demo(history_days=0)
    args, plan = launcher_fleet()
    nodes = {node.hostname: node for node in Node.objects.all()}
    assert {(n.hostname, f"http://127.0.0.1:{n.port}") for n in plan} == {
        (host, node.agent_url) for host, node in nodes.items()}
    assert args.gpus == GPUS_PER_NODE
    assert {n.hostname for n in plan if n.mig} == {MIG_NODE}
    in_maintenance = {host for host, node in nodes.items() if node.status == NodeStatus.MAINTENANCE}
    assert in_maintenance and {n.hostname for n in plan if n.maintenance} == in_maintenance



@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)
def test_the_demos_mig_instances_are_the_ones_its_simulated_agent_reports():
    """The demo's MIG layout is the simulator's (agents/backends/gpu_models.py): syncing the live agent's
    inventory adds no GPU and changes no instance's profile, memory or share."""
    load_demo(history_days=0)
    args, plan = launcher_fleet()
    (mig_node,) = [n for n in plan if n.mig]
    node = Node.objects.get(hostname=mig_node.hostname)

    def instances():
        return {g.uuid: (g.mig_parent.uuid, g.mig_profile, g.memory_mib, g.share)
                for g in Gpu.objects.filter(node=node, mig_parent__isnull=False).select_related("mig_parent")}

    before = instances()
    backend = SimBackend(hostname=node.hostname, gpus=args.gpus, model=mig_node.spec.short_name, seed=args.seed,
                         mig=True)
    assert inventory_apply(node, backend.inventory()) == {"added": 0, "updated": GPUS_PER_NODE + len(before), "missing": 0}
    assert instances() == before and len(before) == len(mig_node.spec.mig_layout)
