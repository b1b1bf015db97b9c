"""GPU memory needed to train a transformer, and how many GPUs of one model that takes: pure integer maths.

All sizes are whole bytes. Per parameter (ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054, §3.1):
weights and gradients take 4 bytes in fp32 and 2 in mixed precision (bf16/fp16); the optimizer states
take K bytes: AdamW 8 (m, v) or 12 with the fp32 master copy of mixed precision, 8-bit AdamW 2 or 6,
SGD with momentum 4 or 8.

Activations per GPU follow Korthikanti et al. 2022 (arXiv:2205.05198): s·b·h·(34 + 5·a·s/h) bytes
per layer with 16-bit activations and no tensor parallelism. With FlashAttention no s×s attention
matrix is kept, so the 5·a·s/h term drops out: 34·s·b·h·L bytes, twice that in fp32. Activations
belong to each GPU's own micro-batch and are never sharded.

Sharding over N GPUs: ``optimizer`` (ZeRO-1) divides the optimizer states by N, ``full`` (ZeRO-3,
FSDP full shard) divides weights, gradients and optimizer states by N. A shard is rounded up to a whole
byte, so the estimate errs on the side of needing more memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from django.utils.translation import gettext_lazy as _

MIB = 1024**2
GIB = 1024**3
ACTIVATION_BYTES_PER_TOKEN_HIDDEN_LAYER = 34  # 16-bit activations (Korthikanti et al. 2022, FlashAttention)

PRECISIONS = [
    ("fp32", _("FP32 (full precision)")),
    ("bf16", _("BF16 mixed precision")),
    ("fp16", _("FP16 mixed precision")),
]
OPTIMIZERS = [
    ("adamw", _("AdamW")),
    ("adamw_8bit", _("AdamW, 8-bit states")),
    ("sgd", _("SGD with momentum")),
]
SHARDINGS = [
    ("none", _("None (plain data parallel)")),
    ("optimizer", _("Optimizer states (ZeRO-1)")),
    ("full", _("Full: weights, gradients, optimizer states (ZeRO-3 / FSDP)")),
]

WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# Optimizer bytes per parameter, (fp32, mixed precision); mixed adds the 4-byte fp32 master weights.
OPTIMIZER_BYTES = {"adamw": (8, 12), "adamw_8bit": (2, 6), "sgd": (4, 8)}
MAX_MARGIN_PCT = 90


def gib(size_bytes: int) -> str:
    """Bytes as GiB with one decimal, for display: ``gib(14 * GIB) == "14.0"``."""
    return f"{size_bytes / GIB:.1f}"


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


class Term(NamedTuple):
    """One line of the estimate: what it is and its unsharded size in bytes."""

    label: str
    size_bytes: int

    @property
    def gib(self) -> str:
        return gib(self.size_bytes)


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The memory a training run takes, in bytes, and the fewest GPUs of one model that hold it."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    sharding: str
    usable_bytes_per_gpu: int
    gpus_needed: int | None  # None: no GPU count up to max_gpus fits (with sharding "none": 1 GPU does not)
    margin_pct: int
    max_gpus: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def sharded_bytes(self) -> int:
        """Bytes divided among the GPUs: nothing, the optimizer states, or weights, gradients and states."""
        if self.sharding == "full":
            return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
        return self.optimizer_bytes if self.sharding == "optimizer" else 0

    @property
    def per_gpu_bytes(self) -> int:
        """Bytes on each GPU at ``gpus_needed`` GPUs, or on one GPU when no count fits."""
        return self.per_gpu_bytes_at(self.gpus_needed or 1)

    def per_gpu_bytes_at(self, gpus: int) -> int:
        """Bytes on each of ``gpus`` GPUs; a shard is rounded up to a whole byte."""
        return self.total_bytes - self.sharded_bytes + _ceil_div(self.sharded_bytes, gpus)

    @property
    def terms(self) -> list[Term]:
        """The unsharded terms as (label, bytes), in display order."""
        return [
            Term(_("Weights"), self.weights_bytes),
            Term(_("Gradients"), self.gradients_bytes),
            Term(_("Optimizer states"), self.optimizer_bytes),
            Term(_("Activations"), self.activations_bytes),
        ]

    @property
    def total_gib(self) -> str:
        return gib(self.total_bytes)

    @property
    def per_gpu_gib(self) -> str:
        return gib(self.per_gpu_bytes)

    @property
    def usable_gib(self) -> str:
        return gib(self.usable_bytes_per_gpu)

    @property
    def no_fit_reason(self) -> str:
        """Why no GPU count fits (empty when one does), in words a person can act on."""
        if self.gpus_needed is not None:
            return ""
        if self.sharding == "none":
            return _(
                "It does not fit on one GPU without sharding. Shard the optimizer states or everything, "
                "lower the micro-batch, or choose a GPU with more memory."
            )
        if self.total_bytes - self.sharded_bytes >= self.usable_bytes_per_gpu:
            return _(
                "It does not fit on any number of GPUs: what is not sharded (the activations, and with "
                "optimizer sharding also weights and gradients) alone fills the usable memory of one GPU. "
                "Lower the micro-batch or sequence length, shard everything, or choose a GPU with more memory."
            )
        return _("It needs more GPUs than the limit of %(max_gpus)d.") % {"max_gpus": self.max_gpus}


def estimate_memory(
    *, params: int, layers: int, hidden: int, seq_len: int, micro_batch: int, precision: str, optimizer: str,
    sharding: str, gpu_memory_mib: int, margin_pct: int = 20, max_gpus: int = 1024,
) -> MemoryEstimate:
    """Memory of one training run and the fewest GPUs of ``gpu_memory_mib`` each that hold it.

    ``margin_pct`` of each GPU's memory is kept free (CUDA context, fragmentation, temporary buffers)."""
    _validate(
        params=params, layers=layers, hidden=hidden, seq_len=seq_len, micro_batch=micro_batch, precision=precision,
        optimizer=optimizer, sharding=sharding, gpu_memory_mib=gpu_memory_mib, margin_pct=margin_pct,
        max_gpus=max_gpus,
    )
    weight_bytes = WEIGHT_BYTES[precision]
    full_precision = precision == "fp32"
    optimizer_per_param = OPTIMIZER_BYTES[optimizer][0 if full_precision else 1]
    activations = ACTIVATION_BYTES_PER_TOKEN_HIDDEN_LAYER * seq_len * micro_batch * hidden * layers
    estimate = MemoryEstimate(
        weights_bytes=params * weight_bytes,
        gradients_bytes=params * weight_bytes,
        optimizer_bytes=params * optimizer_per_param,
        activations_bytes=activations * 2 if full_precision else activations,
        sharding=sharding,
        usable_bytes_per_gpu=gpu_memory_mib * MIB * (100 - margin_pct) // 100,
        gpus_needed=None,
        margin_pct=margin_pct,
        max_gpus=max_gpus,
    )
    return _with_gpus_needed(estimate)


def _with_gpus_needed(estimate: MemoryEstimate) -> MemoryEstimate:
    """Fill in the smallest N. With S bytes sharded, F not and U usable, ceil(S/N) + F <= U holds exactly
    when N >= ceil(S / (U - F)), so no search is needed. Without sharding N is 1 or nothing."""
    sharded = estimate.sharded_bytes
    room = estimate.usable_bytes_per_gpu - (estimate.total_bytes - sharded)
    if estimate.sharding == "none":
        gpus = 1 if room >= 0 else None
    elif room <= 0:
        gpus = None
    else:
        gpus = max(1, _ceil_div(sharded, room))
        gpus = gpus if gpus <= estimate.max_gpus else None
    return replace(estimate, gpus_needed=gpus)


def _validate(*, precision: str, optimizer: str, sharding: str, margin_pct: int, **positive: int) -> None:
    """Raise ValueError naming the field and the rule it breaks."""
    for name, value in positive.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    for name, value, choices in (
        ("precision", precision, PRECISIONS), ("optimizer", optimizer, OPTIMIZERS), ("sharding", sharding, SHARDINGS)
    ):
        allowed = [choice for choice, _label in choices]
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    if isinstance(margin_pct, bool) or not isinstance(margin_pct, int) or not 0 <= margin_pct <= MAX_MARGIN_PCT:
        raise ValueError(f"margin_pct must be an integer from 0 to {MAX_MARGIN_PCT}, not {margin_pct!r}")
