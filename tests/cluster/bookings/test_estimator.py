"""The GPU memory estimator (cluster/bookings/estimator.py, cluster/bookings/estimator_forms.py): hand-computed cases, the
form, the partial, and properties of the GPU count."""

from urllib.parse import urlencode

import pytest
from django.http import QueryDict
from django.template.loader import render_to_string
from hypothesis import given
from hypothesis import strategies as st

from cluster.bookings.estimator import (
    GIB,
    OPTIMIZERS,
    PRECISIONS,
    SHARDINGS,
    MemoryEstimate,
    estimate_memory,
    gib,
)
from cluster.bookings.estimator_forms import EstimatorForm, estimator_context
from cluster.models import GpuModel

H100_MIB, H200_MIB, L40S_MIB = 81559, 143771, 46068
# 34·s·b·h·L = 34 · 4096 · 1 · 4096 · 32 = 34 · 2^29 = 18_253_611_008 B (17 GiB)
ACTIVATIONS_7B = 18_253_611_008
SEVEN_B = {"params": 7_000_000_000, "layers": 32, "hidden": 4096, "seq_len": 4096, "micro_batch": 1}


def estimate_7b(**overrides) -> MemoryEstimate:
    arguments = {**SEVEN_B, "precision": "bf16", "optimizer": "adamw", "sharding": "full", "gpu_memory_mib": H200_MIB}
    return estimate_memory(**{**arguments, **overrides})


def test_it_counts_the_bytes_of_a_7b_model_in_bf16_with_adamw():
    estimate = estimate_7b(sharding="none", gpu_memory_mib=H100_MIB)
    assert estimate.weights_bytes == 14_000_000_000  # 2 B × 7e9
    assert estimate.gradients_bytes == 14_000_000_000  # 2 B × 7e9
    assert estimate.optimizer_bytes == 84_000_000_000  # (4 master + 4 m + 4 v) B × 7e9
    assert estimate.activations_bytes == ACTIVATIONS_7B == 34 * 4096 * 1 * 4096 * 32
    assert estimate.total_bytes == 130_253_611_008  # 14e9 + 14e9 + 84e9 + 18_253_611_008
    assert estimate.terms == [
        ("Weights", 14_000_000_000), ("Gradients", 14_000_000_000),
        ("Optimizer states", 84_000_000_000), ("Activations", ACTIVATIONS_7B),
    ]
    assert [term.gib for term in estimate.terms] == ["13.0", "13.0", "78.2", "17.0"]


def test_it_does_not_fit_an_80_gib_gpu_without_sharding():
    estimate = estimate_7b(sharding="none", gpu_memory_mib=H100_MIB)
    # 81559 MiB × 1_048_576 = 85_520_809_984 B; × 80 // 100 = 68_416_647_987 B < 130_253_611_008 B
    assert estimate.usable_bytes_per_gpu == 68_416_647_987
    assert estimate.gpus_needed is None
    assert estimate.per_gpu_bytes == estimate.total_bytes  # shown on one GPU
    assert "without sharding" in str(estimate.no_fit_reason)


def test_it_shards_everything_over_two_h200():
    estimate = estimate_7b(sharding="full")
    # usable: 143771 × 1_048_576 × 80 // 100 = 120_603_856_076 B; room after activations:
    # 120_603_856_076 − 18_253_611_008 = 102_350_245_068 B; sharded 112e9 B → N = ceil(1.094…) = 2
    assert estimate.usable_bytes_per_gpu == 120_603_856_076
    assert estimate.gpus_needed == 2
    assert estimate.per_gpu_bytes == 74_253_611_008  # 112e9 / 2 + 18_253_611_008
    assert estimate.no_fit_reason == ""


def test_it_needs_one_h200_fewer_without_head_room():
    # margin 0: usable 150_754_820_096 B, room 132_501_209_088 B ≥ 112e9 B → N = 1
    assert estimate_7b(sharding="full", margin_pct=0).gpus_needed == 1
    assert estimate_7b(sharding="full", margin_pct=20).gpus_needed == 2


def test_it_shards_the_optimizer_states_over_three_l40s():
    estimate = estimate_memory(
        params=1_300_000_000, layers=24, hidden=2048, seq_len=2048, micro_batch=8, precision="bf16",
        optimizer="adamw", sharding="optimizer", gpu_memory_mib=L40S_MIB,
    )
    # activations 34 · 2048 · 8 · 2048 · 24 = 27_380_416_512 B; weights + gradients 2 × 2.6e9 B;
    # unsharded 32_580_416_512 B; usable 46068 × 1_048_576 × 80 // 100 = 38_644_639_334 B;
    # room 6_064_222_822 B; optimizer 15.6e9 B → N = ceil(2.57…) = 3 (7.8e9 B on 2 would not fit)
    assert estimate.activations_bytes == 27_380_416_512
    assert estimate.optimizer_bytes == 15_600_000_000
    assert estimate.gpus_needed == 3
    assert estimate.per_gpu_bytes == 37_780_416_512  # 32_580_416_512 + 15.6e9 / 3
    assert estimate.per_gpu_bytes_at(2) > estimate.usable_bytes_per_gpu


def test_it_doubles_activations_and_weights_in_fp32():
    estimate = estimate_7b(precision="fp32")
    assert estimate.activations_bytes == 2 * ACTIVATIONS_7B
    assert (estimate.weights_bytes, estimate.gradients_bytes) == (28_000_000_000, 28_000_000_000)  # 4 B × 7e9
    assert estimate.optimizer_bytes == 56_000_000_000  # (4 m + 4 v) B × 7e9, no master copy


@pytest.mark.parametrize(
    ("optimizer", "precision", "optimizer_bytes"),
    [
        ("adamw_8bit", "bf16", 42_000_000_000),  # (4 master + 2) B × 7e9
        ("adamw_8bit", "fp32", 14_000_000_000),  # 2 B × 7e9
        ("sgd", "fp16", 56_000_000_000),  # (4 master + 4 momentum) B × 7e9
        ("sgd", "fp32", 28_000_000_000),  # 4 B × 7e9
    ],
)
def test_it_counts_optimizer_states_per_optimizer(optimizer, precision, optimizer_bytes):
    assert estimate_7b(optimizer=optimizer, precision=precision).optimizer_bytes == optimizer_bytes


def test_it_says_when_the_unsharded_part_alone_does_not_fit():
    # activations at micro-batch 4: 4 × 18_253_611_008 = 73_014_444_032 B > 38_644_639_334 B usable on L40S
    estimate = estimate_7b(micro_batch=4, gpu_memory_mib=L40S_MIB)
    assert estimate.gpus_needed is None
    assert "any number of GPUs" in str(estimate.no_fit_reason)


def test_it_stops_at_max_gpus():
    # L40S: room 38_644_639_334 − 18_253_611_008 = 20_391_028_326 B; 112e9 B → N = ceil(5.49…) = 6
    assert estimate_7b(gpu_memory_mib=L40S_MIB, max_gpus=6).gpus_needed == 6
    estimate = estimate_7b(gpu_memory_mib=L40S_MIB, max_gpus=5)
    assert estimate.gpus_needed is None
    assert str(estimate.no_fit_reason) == "It needs more GPUs than the limit of 5."


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("params", 0, "positive integer"), ("layers", -1, "positive integer"), ("hidden", 0, "positive integer"),
        ("seq_len", 0, "positive integer"), ("micro_batch", 0, "positive integer"),
        ("gpu_memory_mib", 0, "positive integer"), ("max_gpus", 0, "positive integer"),
        ("precision", "int8", "one of fp32, bf16, fp16"), ("optimizer", "adam", "one of adamw"),
        ("sharding", "zero2", "one of none, optimizer, full"), ("margin_pct", 91, "from 0 to 90"),
        ("margin_pct", -1, "from 0 to 90"),
    ],
)
def test_it_refuses_bad_inputs_naming_the_field(field, value, rule):
    with pytest.raises(ValueError, match=rf"^{field} must be .*{rule}"):
        estimate_7b(**{field: value})


def test_gib_shows_one_decimal():
    assert (gib(14 * GIB), gib(3 * GIB // 2), gib(GIB // 10), gib(0)) == ("14.0", "1.5", "0.1", "0.0")


@given(
    params=st.integers(1, 10**12), layers=st.integers(1, 128), hidden=st.integers(1, 16384),
    seq_len=st.integers(1, 65536), micro_batch=st.integers(1, 16),
    precision=st.sampled_from([value for value, _label in PRECISIONS]),
    optimizer=st.sampled_from([value for value, _label in OPTIMIZERS]),
    sharding=st.sampled_from([value for value, _label in SHARDINGS]),
    gpu_memory_mib=st.integers(1, 200_000), margin_pct=st.integers(0, 90), max_gpus=st.integers(1, 64),
)
def test_gpus_needed_is_the_fewest_that_fit_and_more_gpus_never_need_more_memory(**arguments):
    estimate = estimate_memory(**arguments)
    per_gpu = [estimate.per_gpu_bytes_at(gpus) for gpus in range(1, arguments["max_gpus"] + 1)]
    assert per_gpu == sorted(per_gpu, reverse=True)
    fitting = [gpus for gpus, size in enumerate(per_gpu, start=1) if size <= estimate.usable_bytes_per_gpu]
    assert estimate.gpus_needed == (fitting[0] if fitting else None)
    assert (estimate.gpus_needed is None) == bool(estimate.no_fit_reason)


def form_data(model: GpuModel, **overrides) -> QueryDict:
    fields = {
        "params_billion": "7", "layers": "32", "hidden": "4096", "seq_len": "4096", "micro_batch": "1",
        "precision": "bf16", "optimizer": "adamw", "sharding": "full", "gpu_model": str(model.pk), "margin_pct": "20",
    }
    return QueryDict(urlencode({f"est-{key}": value for key, value in {**fields, **overrides}.items()} | {"estimate": 1}))


def test_it_shows_an_unbound_form_with_a_7b_model_by_default(small_cluster):
    context = estimator_context(QueryDict("page=2"), gpu_models=GpuModel.objects.all())
    form = context["estimator_form"]
    assert not form.is_bound
    assert context["estimate"] is None
    assert (form["layers"].value(), form["sharding"].value(), form["margin_pct"].value()) == (32, "full", 20)


def test_it_estimates_from_the_submitted_form(small_cluster):
    context = estimator_context(form_data(small_cluster["h200"]), gpu_models=GpuModel.objects.all())
    assert context["estimator_form"].is_bound
    assert context["estimate"] == estimate_7b(sharding="full", gpu_memory_mib=H200_MIB, margin_pct=20)
    assert context["estimate_gpu_model"] == small_cluster["h200"]


def test_it_reads_fractions_of_a_billion_parameters(small_cluster):
    context = estimator_context(form_data(small_cluster["l40s"], params_billion="0.5"), gpu_models=GpuModel.objects.all())
    assert context["estimate"].weights_bytes == 1_000_000_000  # 2 B × 0.5e9


@pytest.mark.parametrize(("field", "value"), [("layers", "0"), ("params_billion", "0"), ("margin_pct", "91")])
def test_it_reports_a_bad_field_on_the_form(small_cluster, field, value):
    context = estimator_context(form_data(small_cluster["h200"], **{field: value}), gpu_models=GpuModel.objects.all())
    assert context["estimate"] is None
    assert list(context["estimator_form"].errors) == [field]


def test_the_form_offers_only_the_given_gpu_models(small_cluster):
    form = EstimatorForm(gpu_models=GpuModel.objects.filter(short_name="L40S"))
    assert [str(model) for model in form.fields["gpu_model"].queryset] == ["L40S"]


def test_it_renders_the_gpu_count_and_the_sources(small_cluster):
    context = estimator_context(form_data(small_cluster["h200"]), gpu_models=GpuModel.objects.all())
    html = render_to_string("cluster/_estimator.html", context)
    assert '<strong data-testid="estimate-gpus">2</strong> × H200' in html
    assert '<table class="estimate">' in html
    assert "<td>78.2</td>" in html  # optimizer states, 84e9 B
    assert "arXiv:1910.02054" in html and "arXiv:2205.05198" in html and "FlashAttention" in html
    assert 'name="est-params_billion"' in html


def test_it_renders_why_it_does_not_fit(small_cluster):
    context = estimator_context(form_data(small_cluster["l40s"], sharding="none"), gpu_models=GpuModel.objects.all())
    html = render_to_string("cluster/_estimator.html", context)
    assert 'data-testid="estimate-no-fit"' in html
    assert 'data-testid="estimate-gpus"' not in html


def test_it_renders_no_table_before_the_estimator_is_submitted(small_cluster):
    html = render_to_string("cluster/_estimator.html", estimator_context(QueryDict(), gpu_models=GpuModel.objects.all()))
    assert 'id="estimator"' in html
    assert '<table class="estimate">' not in html
