"""The GPU memory estimator's form, shown beside the booking form (its fields carry the ``est-`` prefix)."""

from decimal import Decimal

from django import forms
from django.utils.translation import gettext_lazy as _

from cluster.bookings.estimator import (
    MAX_MARGIN_PCT,
    OPTIMIZERS,
    PRECISIONS,
    SHARDINGS,
    MemoryEstimate,
    estimate_memory,
)

PARAMS_PER_BILLION = 10**9
SMALLEST_BILLION = Decimal("0.000001")  # a thousand parameters: six decimals keep the count whole
BOUND_KEY = "est-params_billion"  # present in the GET data only when the estimator was submitted


class EstimatorForm(forms.Form):
    """A model's shape and training set-up, and the GPU model to fit it on."""

    prefix = "est"

    params_billion = forms.DecimalField(
        label=_("Parameters"), help_text=_("In billions of parameters, for example 7 or 0.5."),
        initial=Decimal(7), min_value=SMALLEST_BILLION, max_value=Decimal(100_000), max_digits=12, decimal_places=6,
    )
    layers = forms.IntegerField(
        label=_("Layers"), help_text=_("Number of transformer layers."), initial=32, min_value=1, max_value=1000
    )
    hidden = forms.IntegerField(
        label=_("Hidden size"), help_text=_("Width of the hidden state (d_model), in elements, for example 4096."),
        initial=4096, min_value=1, max_value=262_144,
    )
    seq_len = forms.IntegerField(
        label=_("Sequence length"), help_text=_("In tokens per sample."), initial=4096, min_value=1,
        max_value=4_194_304,
    )
    micro_batch = forms.IntegerField(
        label=_("Micro-batch per GPU"), help_text=_("In samples per GPU per forward pass."), initial=1,
        min_value=1, max_value=4096,
    )
    precision = forms.ChoiceField(label=_("Precision"), choices=PRECISIONS, initial="bf16")
    optimizer = forms.ChoiceField(label=_("Optimizer"), choices=OPTIMIZERS, initial="adamw")
    sharding = forms.ChoiceField(
        label=_("Sharding"), choices=SHARDINGS, initial="full",
        help_text=_("What is divided among the GPUs: ZeRO-1 shards the optimizer states, ZeRO-3 or FSDP everything."),
    )
    gpu_model = forms.ModelChoiceField(label=_("GPU model"), queryset=None, empty_label=None)
    margin_pct = forms.IntegerField(
        label=_("Head-room"), initial=20, min_value=0, max_value=MAX_MARGIN_PCT,
        help_text=_(
            "In percent of each GPU's memory, kept free for the CUDA context, fragmentation and temporary buffers."
        ),
    )

    def __init__(self, data=None, *, gpu_models, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["gpu_model"].queryset = gpu_models

    def estimate(self) -> MemoryEstimate:
        """The estimate for the cleaned data; call after ``is_valid()``."""
        data = self.cleaned_data
        return estimate_memory(
            params=int(data["params_billion"] * PARAMS_PER_BILLION),
            layers=data["layers"], hidden=data["hidden"], seq_len=data["seq_len"], micro_batch=data["micro_batch"],
            precision=data["precision"], optimizer=data["optimizer"], sharding=data["sharding"],
            gpu_memory_mib=data["gpu_model"].memory_mib, margin_pct=data["margin_pct"],
        )


def estimator_context(data, *, gpu_models) -> dict:
    """Context for ``cluster/_estimator.html``: the form, bound only when the estimator was submitted
    (``data`` is request.GET), the estimate when the form is valid, and the GPU model it is for."""
    if BOUND_KEY not in data:
        return {"estimator_form": EstimatorForm(gpu_models=gpu_models), "estimate": None, "estimate_gpu_model": None}
    form = EstimatorForm(data, gpu_models=gpu_models)
    if not form.is_valid():
        return {"estimator_form": form, "estimate": None, "estimate_gpu_model": None}
    return {"estimator_form": form, "estimate": form.estimate(), "estimate_gpu_model": form.cleaned_data["gpu_model"]}
