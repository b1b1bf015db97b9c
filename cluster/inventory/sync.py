"""Fill the inventory from an agent's ``/v1/inventory``: new GPUs registered, missing ones marked
``missing`` (never deleted), MIG instances as child GPUs with their share of the parent
(:func:`mig_shares`)."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from django.db import transaction

from cluster.choices import GpuStatus
from cluster.models import Gpu, GpuModel, GpuModelAlias, Node
from core.units import WHOLE_GPU_SHARE, share_from_fraction


def gpu_model_for(name: str, memory_mib: int | None) -> GpuModel:
    """The catalogue entry for an NVML name, created with a derived short name when first seen.

    An upsert (``INSERT … ON CONFLICT DO NOTHING``), so two collections that meet the same new name at
    once never fail on the unique name: the second waits for the first and reads its row. Only a short
    name taken in between by another model sends it round again, with the next free short name."""
    for _attempt in range(5):
        model = GpuModel.objects.filter(name=name).first()
        if model is not None:
            return model
        short = _short_name(name)
        taken = set(GpuModel.objects.filter(short_name__startswith=short).values_list("short_name", flat=True))
        candidate, n = short, 2
        while candidate in taken:
            candidate, n = f"{short}-{n}", n + 1
        GpuModel.objects.bulk_create(
            [GpuModel(name=name, short_name=candidate, memory_mib=memory_mib or 0)], ignore_conflicts=True
        )
    return GpuModel.objects.get(name=name)


GPU_MODEL_NAME_MAX = GpuModel._meta.get_field("name").max_length


def spaced_name(name: str) -> str:
    """A GPU model name compared loosely: lower case, ``_`` and ``-`` read as spaces, spaces collapsed."""
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def check_gpu_model_name(name: str) -> str:
    """``name`` stripped, if it can name a new GPU model; else a ValueError saying why."""
    name = name.strip()
    if not name or len(name) > GPU_MODEL_NAME_MAX or not name.isprintable():
        raise ValueError(f"{name[:40]!r} is not a GPU model name (1 to {GPU_MODEL_NAME_MAX} printable characters)")
    return name


class GpuModelCatalogue:
    """The GPU models by every name a file may use for them, loaded once (two queries): without regard to
    case, a model's NVML name (also written with ``_`` or ``-`` for spaces), its short name, then its
    aliases (GpuModelAlias, e.g. a Slurm GRES type). An alias never shadows a model's own names."""

    def __init__(self) -> None:
        self._by_key: dict[str, GpuModel] = {}
        models = list(GpuModel.objects.all())  # a catalogue of a few dozen
        for key_of in (lambda m: m.name.lower(), lambda m: spaced_name(m.name), lambda m: m.short_name.lower()):
            for model in models:
                self._by_key.setdefault(key_of(model), model)
        for alias in GpuModelAlias.objects.select_related("model"):
            self._by_key.setdefault(alias.alias, alias.model)

    def match(self, name: str) -> GpuModel | None:
        key = name.strip().lower()
        return self._by_key.get(key) or self._by_key.get(spaced_name(key))

    def add(self, name: str, model: GpuModel) -> None:
        """Answer ``name`` with ``model`` from now on (a model made, or to be made, on the way)."""
        self._by_key[name.strip().lower()] = model


class GpuModelNames:
    """Names resolved for one import (a 100,000-row file names a handful): a known one by the
    :class:`GpuModelCatalogue`, an unknown one made a new model (memory 0, unknown) through
    :func:`gpu_model_for`, so it never rejects a row; ``created`` lists those, by NVML name."""

    def __init__(self) -> None:
        self._catalogue: GpuModelCatalogue | None = None  # loaded at the first name
        self.created: list[str] = []

    def resolve(self, name: str) -> GpuModel:
        if self._catalogue is None:
            self._catalogue = GpuModelCatalogue()
        model = self._catalogue.match(name)
        if model is None:
            model = gpu_model_for(check_gpu_model_name(name), None)
            self._catalogue.add(name, model)
            self.created.append(model.name)
        return model


def gpu_model_resolve(name: str) -> tuple[GpuModel, bool]:
    """(the GPU model ``name`` means, whether it was created now): :class:`GpuModelNames` for one name."""
    names = GpuModelNames()
    return names.resolve(name), bool(names.created)


def _short_name(name: str) -> str:
    words = [w for w in name.replace("NVIDIA", "").split() if w]
    return (words[0] if words else name)[:32] or "GPU"


@transaction.atomic
def inventory_apply(node: Node, inventory: dict) -> dict[str, int]:
    """Register what the agent reports. Returns counts: added, updated, missing."""
    reported = _reported_uuids(inventory)
    counts = {"added": 0, "updated": 0, "missing": 0}
    # Missing first: a replaced GPU frees its index for the new UUID (the index is unique among active GPUs).
    counts["missing"] = Gpu.objects.filter(node=node, status=GpuStatus.ACTIVE).exclude(uuid__in=reported).update(
        status=GpuStatus.MISSING
    )
    for gpu_info in inventory.get("gpus") or []:
        uuid, name = gpu_info.get("uuid"), gpu_info.get("name") or "unknown"
        if not isinstance(uuid, str) or not uuid:
            continue
        model = gpu_model_for(name, gpu_info.get("memory_mib"))
        parent, created = Gpu.objects.update_or_create(
            uuid=uuid,
            defaults={
                "node": node, "index": int(gpu_info.get("index") or 0), "model": model,
                "memory_mib": int(gpu_info.get("memory_mib") or model.memory_mib),
                "pci_bus_id": gpu_info.get("pci_bus_id") or "", "status": GpuStatus.ACTIVE,
                "mig_parent": None, "share": WHOLE_GPU_SHARE,
            },
        )
        counts["added" if created else "updated"] += 1
        migs = [m for m in gpu_info.get("mig_instances") or [] if isinstance(m.get("uuid"), str)]
        for mig, share in zip(migs, mig_shares(migs), strict=True):
            _mig, created = Gpu.objects.update_or_create(
                uuid=mig["uuid"],
                defaults={
                    "node": node, "index": parent.index, "model": model, "mig_parent": parent,
                    "memory_mib": int(mig.get("memory_mib") or 0), "mig_profile": mig.get("profile") or "",
                    "share": share, "status": GpuStatus.ACTIVE,
                },
            )
            counts["added" if created else "updated"] += 1
    return counts


def mig_shares(instances: list[dict]) -> list[int]:
    """The share (ticks per second, core/units.py) of each MIG instance of one GPU, in order, from the
    inventory's ``gi_id``, ``slices``, ``total_slices`` and ``sm_count``.

    A GPU instance holds ``slices / total_slices`` of the GPU (1/7 when the agent does not say). Every
    compute instance of it reports the GPU instance's slices, so that share is split between them in
    proportion to their ``sm_count`` (``1c.3g`` 16 and ``2c.3g`` 32 SMs: 1/3 and 2/3 of the 3g's 3/7),
    equally when any of them lacks one. Shares are whole ticks: each part is rounded down and the ticks
    left go to the largest remainders, so the parts add up to exactly the GPU instance's share, and the
    instances of a GPU never to more than :data:`WHOLE_GPU_SHARE` (a bogus inventory whose GPU instances
    claim more is scaled down to it)."""
    members: dict[object, list[int]] = defaultdict(list)  # gi_id → positions of its compute instances
    for position, instance in enumerate(instances):
        members[instance.get("gi_id")].append(position)
    shares = [0] * len(instances)
    gi_shares = {gi: _gi_share(instances[positions[0]]) for gi, positions in members.items()}
    if sum(gi_shares.values()) > WHOLE_GPU_SHARE:
        gi_shares = dict(zip(gi_shares, _split(WHOLE_GPU_SHARE, list(gi_shares.values())), strict=True))
    for gi, positions in members.items():
        sm_counts = [instances[p].get("sm_count") for p in positions]
        known = all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sm_counts)
        for position, part in zip(positions, _split(gi_shares[gi], sm_counts if known else [1] * len(positions)),
                                  strict=True):
            shares[position] = max(1, part)  # a share is at least one tick (gpu_share_within_one_gpu)
    return shares


def _gi_share(instance: dict) -> int:
    """A GPU instance's share from one of its compute instances' ``slices / total_slices`` (rounded down)."""
    slices, total = instance.get("slices"), instance.get("total_slices")
    if isinstance(slices, int) and isinstance(total, int) and 0 < slices <= total:
        return WHOLE_GPU_SHARE * slices // total
    return share_from_fraction(Fraction(1, 7))


def _split(total: int, weights: list[int]) -> list[int]:
    """``total`` in whole parts proportional to ``weights`` (positive), adding up to exactly ``total``:
    each part rounded down, the rest one each to the largest remainders (the first of equal ones)."""
    whole = sum(weights)
    parts = [total * weight // whole for weight in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _reported_uuids(inventory: dict) -> set[str]:
    uuids = set()
    for gpu_info in inventory.get("gpus") or []:
        uuids.add(gpu_info.get("uuid"))
        uuids.update(mig.get("uuid") for mig in gpu_info.get("mig_instances") or [])
    return {u for u in uuids if isinstance(u, str) and u}
