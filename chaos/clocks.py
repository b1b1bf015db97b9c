"""An agent's clock an hour ahead or behind: the node is flagged, and its records are handled as
DESIGN.md §3 says: validated one by one, records further in the future than TELEMETRY_MAX_FUTURE_S refused
and counted (an hour ahead: every one), records within the age bound stored (an hour behind: every one),
and the cursor moved past both, so that the node's collection goes on."""

from __future__ import annotations

from chaos import seed
from chaos.observe import agent_last_seqs, collected_up_to, node_counts, wait_for
from chaos.verdicts import NodeCount, Verdict, count_problems, verdict

OFFSETS = {"ahead": 3600, "behind": -3600}


def _flags(hostname: str) -> list[str]:
    """Open alerts of a clock kind on the node."""
    from cluster.models import Alert, Node

    node = Node.objects.get(hostname=hostname)
    return list(Alert.objects.filter(subject_type="node", subject_id=node.pk, closed_at__isnull=True)
                .filter(kind__regex=r"clock|skew").values_list("kind", flat=True))


def skewed_clocks(ctx) -> Verdict:
    from django.conf import settings

    from cluster.models import CollectionState

    fleets = {}
    for side, offset in OFFSETS.items():
        fleets[side] = ctx.stack.start_fleet(f"clock-{side}", nodes=1, gpus=1, prefix=f"{side}-", clock_offset_s=offset)
        seed.register_nodes(fleets[side])
    hosts = {side: next(iter(tokens)) for side, tokens in fleets.items()}
    problems, evidence = [], []
    try:
        wait_for(lambda: all(min(agent_last_seqs(t).values()) >= 3 for t in fleets.values()), timeout_s=60)
        produced = {hosts[side]: agent_last_seqs(tokens)[hosts[side]] for side, tokens in fleets.items()}
        if not wait_for(lambda: collected_up_to(produced), timeout_s=ctx.catch_up_s):
            problems.append("the skewed nodes were not collected up to their agents")
        flagged = wait_for(lambda: all(_flags(host) for host in hosts.values()), timeout_s=ctx.catch_up_s)
        counts = {c.node: c for c in node_counts(produced)}
        skews = dict(CollectionState.objects.filter(node__hostname__in=hosts.values())
                     .values_list("node__hostname", "clock_skew_s"))
        for side, host in hosts.items():
            c = counts[host]
            flags = _flags(host)
            if not flagged and not flags:
                problems.append(f"{host} ({side} {OFFSETS[side]:+d}s) is not flagged")
            ahead = OFFSETS[side] > settings.TELEMETRY_MAX_FUTURE_S
            # An hour ahead is beyond the future bound: every record refused; an hour behind: every one stored.
            wanted = NodeCount(c.node, c.produced, c.cursor, 0 if ahead else c.cursor, 0 if ahead else c.cursor,
                               c.cursor if ahead else 0, 0)
            if (c.stored, c.rejected) != (wanted.stored, wanted.rejected):
                problems.append(f"{host}: stored {c.stored} and refused {c.rejected} of {c.cursor}, "
                                f"not {wanted.stored} and {wanted.rejected}")
            problems += count_problems([c])
            evidence.append(f"{side}: skew={skews.get(host) or 0:+.0f}s flags={','.join(flags) or 'none'} "
                            f"produced={c.produced} stored={c.stored} refused={c.rejected}")
        healthy = [h for h in ctx.stack.tokens if _flags(h)]
        if healthy:
            problems.append(f"nodes with a true clock flagged: {', '.join(healthy)}")
    finally:
        for side in fleets:
            ctx.stack.stop(f"clock-{side}")
        seed.retire_nodes(hosts.values())
    return verdict("clock-skew", problems, " | ".join(evidence))
