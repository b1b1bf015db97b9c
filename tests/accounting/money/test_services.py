"""Writes to prices, the charge policy and quotas (accounting.money.services): each bad input of issue 7
refused with the rule named, overlapping validity refused also when two writers race, who may write,
and the audit trail (who, when, before, after) of every change."""

import threading
from datetime import date
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection

from accounting.models import ChargePolicy, EnergyTariff, MoneyChange, Quota, RateCard
from accounting.money import services as money_services
from accounting.money.close import close_period
from accounting.money.services import (
    energy_tariff_delete,
    energy_tariff_save,
    policy_update,
    quota_delete,
    quota_save,
    rate_card_delete,
    rate_card_save,
)
from cluster.models import GpuModel
from tests.accounting.money.test_close import AFTER, NOVEMBER, month  # noqa: F401 (the hand-priced month)

pytestmark = pytest.mark.django_db
DEC = date(2026, 12, 1)


@pytest.fixture(autouse=True)
def configured_currency(settings):
    settings.CARDHOUR_CURRENCY = "CNY"


@pytest.fixture
def h200(db):
    return GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)


def card(user, model, first, following, price="20", **extra):
    return rate_card_save(user=user, gpu_model=model, valid_from=first, valid_until=following,
                          price_per_card_hour=Decimal(price), **extra)


def problems(raised) -> dict:
    return raised.value.message_dict


# ---- rate cards ------------------------------------------------------------------------------------------

def test_it_creates_a_rate_card_in_the_configured_currency_and_records_it(finance_user, h200):
    created = card(finance_user, h200, NOVEMBER, date(2026, 11, 15))
    assert (created.currency, created.price_per_card_hour) == ("CNY", Decimal("20"))
    change = MoneyChange.objects.get()
    assert change.changed_by == finance_user and change.changed_at is not None
    assert change.subject == f"rate card {created.pk} (H200)"
    assert change.before is None
    assert change.after == {"gpu_model": "H200", "valid_from": "2026-11-01", "valid_until": "2026-11-15",
                            "price_per_card_hour": "20.0000", "currency": "CNY"}


def test_an_overlapping_validity_for_one_model_is_refused_naming_the_other_card(finance_user, h200):
    card(finance_user, h200, NOVEMBER, date(2026, 11, 15))
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, date(2026, 11, 10), None)
    assert problems(refused) == {"valid_from": ["overlaps the rate card valid 2026-11-01 – 2026-11-15 for H200."]}
    # The day the first one ends is free (validity is [from, until)); another model is independent.
    card(finance_user, h200, date(2026, 11, 15), None, price="18")
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    card(finance_user, l40s, NOVEMBER, None, price="5")
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, date(2027, 1, 1), None)
    assert problems(refused)["valid_from"] == ["overlaps the rate card valid 2026-11-15 – (open-ended) for H200."]
    assert RateCard.objects.count() == 3 and MoneyChange.objects.count() == 3


@pytest.mark.parametrize(("price", "field", "message"), [
    ("-0.01", "price_per_card_hour", "must be zero or more."),
    ("NaN", "price_per_card_hour", "must be a number."),
])
def test_a_negative_or_non_numeric_price_is_refused(finance_user, h200, price, field, message):
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, NOVEMBER, None, price=price)
    assert problems(refused) == {field: [message]}
    assert not RateCard.objects.exists() and not MoneyChange.objects.exists()


def test_a_free_price_is_allowed(finance_user, h200):
    assert card(finance_user, h200, NOVEMBER, None, price="0").price_per_card_hour == 0


@pytest.mark.parametrize("following", [NOVEMBER, date(2026, 10, 31)])
def test_valid_until_must_follow_valid_from(finance_user, h200, following):
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, NOVEMBER, following)
    assert list(problems(refused)) == ["valid_until"]
    assert problems(refused)["valid_until"][0].startswith("must be after valid_from")


def test_an_unknown_currency_is_refused_with_the_validators_message(finance_user, h200):
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, NOVEMBER, None, currency="XYZ")
    assert problems(refused) == {"currency": ["XYZ is not a known ISO 4217 currency code (e.g. CNY, USD, EUR)."]}


def test_a_known_currency_other_than_the_configured_one_is_refused(finance_user, h200):
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, NOVEMBER, None, currency="USD")
    assert problems(refused) == {"currency": ["rate cards are in the configured currency CNY, not USD."]}
    assert card(finance_user, h200, NOVEMBER, None, currency="CNY").currency == "CNY"


def test_several_bad_fields_are_named_together(finance_user, h200):
    with pytest.raises(ValidationError) as refused:
        rate_card_save(user=finance_user, gpu_model=None, valid_from=NOVEMBER, valid_until=NOVEMBER,
                       price_per_card_hour=Decimal("-1"), currency="EUR")
    assert set(problems(refused)) == {"gpu_model", "valid_until", "price_per_card_hour", "currency"}


def test_changing_and_deleting_a_rate_card_record_before_and_after(admin_user, finance_user, h200):
    created = card(finance_user, h200, NOVEMBER, None)
    changed = card(admin_user, h200, NOVEMBER, DEC, price="21.5", card=created)
    assert changed.pk == created.pk and RateCard.objects.get().price_per_card_hour == Decimal("21.5")
    change = MoneyChange.objects.filter(changed_by=admin_user).get()
    assert change.before["price_per_card_hour"] == "20.0000" and change.before["valid_until"] is None
    assert change.after["price_per_card_hour"] == "21.5000" and change.after["valid_until"] == "2026-12-01"
    # Saving the same values again changes nothing and records nothing.
    card(admin_user, h200, NOVEMBER, DEC, price="21.50", card=changed)
    assert MoneyChange.objects.count() == 2

    rate_card_delete(user=finance_user, card=changed)
    assert not RateCard.objects.exists()
    deleted = MoneyChange.objects.first()  # newest first
    assert (deleted.subject, deleted.changed_by, deleted.after) == (f"rate card {created.pk} (H200)", finance_user,
                                                                     None)
    assert deleted.before["price_per_card_hour"] == "21.5000"


def test_a_change_to_its_own_validity_does_not_overlap_itself(finance_user, h200):
    created = card(finance_user, h200, NOVEMBER, DEC)
    assert card(finance_user, h200, date(2026, 10, 1), None, card=created).valid_from == date(2026, 10, 1)


def test_changing_a_price_a_closed_statement_used_is_allowed_and_recorded(month, finance_user):  # noqa: F811
    close_period(period=NOVEMBER, now=AFTER)
    later = RateCard.objects.get(valid_from=date(2026, 11, 15))
    changed = card(finance_user, later.gpu_model, later.valid_from, None, price="19", card=later)
    assert changed.closed_periods == ["2026-11"]
    assert MoneyChange.objects.get().subject == f"rate card {later.pk} (H200); priced closed 2026-11"
    # A card for days no closed statement holds says nothing more.
    fresh = card(finance_user, later.gpu_model, date(2026, 10, 1), NOVEMBER, price="25")
    assert fresh.closed_periods == [] and MoneyChange.objects.first().subject == f"rate card {fresh.pk} (H200)"


def test_the_exclusion_constraints_refusal_gives_the_same_error(monkeypatch, finance_user, h200):
    """The path a losing racer takes: the check before found nothing, the constraint refuses the write."""
    card(finance_user, h200, NOVEMBER, date(2026, 11, 15))
    real, calls = money_services._overlapping, []

    def blind_first(*args, **kwargs):
        calls.append(1)
        return None if len(calls) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(money_services, "_overlapping", blind_first)
    with pytest.raises(ValidationError) as refused:
        card(finance_user, h200, date(2026, 11, 10), None)
    assert problems(refused) == {"valid_from": ["overlaps the rate card valid 2026-11-01 – 2026-11-15 for H200."]}
    assert len(calls) == 2 and RateCard.objects.count() == 1 and MoneyChange.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_writers_racing_for_overlapping_validity_give_one_card_and_one_validation_error(finance_user,
                                                                                          admin_user, h200):
    barrier = threading.Barrier(2)
    saved, refused, errors = [], [], []

    def write(user, first):
        try:
            barrier.wait(timeout=30)
            saved.append(card(user, h200, first, None))
        except ValidationError as exc:
            refused.append(exc.message_dict)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=args)
               for args in ((finance_user, NOVEMBER), (admin_user, date(2026, 11, 20)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and len(saved) == 1 and len(refused) == 1
    assert list(refused[0]) == ["valid_from"]
    assert refused[0]["valid_from"][0].startswith("overlaps the rate card valid ")
    assert RateCard.objects.count() == 1 and MoneyChange.objects.count() == 1


# ---- energy tariffs --------------------------------------------------------------------------------------

def test_energy_tariffs_follow_the_same_rules_and_are_recorded(finance_user):
    tariff = energy_tariff_save(user=finance_user, valid_from=NOVEMBER, valid_until=None,
                                price_per_kwh=Decimal("0.85"))
    assert MoneyChange.objects.get().after == {"valid_from": "2026-11-01", "valid_until": None,
                                               "price_per_kwh": "0.8500", "currency": "CNY"}
    with pytest.raises(ValidationError) as refused:
        energy_tariff_save(user=finance_user, valid_from=DEC, valid_until=None, price_per_kwh=Decimal("-1"),
                           currency="EUR")
    assert problems(refused) == {"valid_from": ["overlaps the energy tariff valid 2026-11-01 – (open-ended)."],
                                 "price_per_kwh": ["must be zero or more."],
                                 "currency": ["energy tariffs are in the configured currency CNY, not EUR."]}
    energy_tariff_save(user=finance_user, valid_from=NOVEMBER, valid_until=DEC, price_per_kwh=Decimal("0.85"),
                       tariff=tariff)
    energy_tariff_delete(user=finance_user, tariff=tariff)
    assert not EnergyTariff.objects.exists()
    assert [change.subject for change in MoneyChange.objects.all()] == [f"energy tariff {tariff.pk}"] * 3


# ---- the charge policy -----------------------------------------------------------------------------------

def test_the_first_policy_change_creates_the_row_from_the_settings(settings, finance_user):
    settings.CHARGE_IDLE_FACTOR, settings.CHARGE_OVERFLOW_MULTIPLIER, settings.CHARGE_UNALLOCATED = "1.0", "1.5", "kept"
    assert not ChargePolicy.objects.exists()
    policy = policy_update(user=finance_user, idle_charge_factor=Decimal("0.5"))
    assert (policy.idle_charge_factor, policy.overflow_multiplier, policy.unallocated) == (
        Decimal("0.5"), Decimal("1.5"), "kept")
    change = MoneyChange.objects.get()
    assert (change.subject, change.changed_by) == ("charge policy", finance_user)
    assert change.before == {"idle_charge_factor": "1.0000", "overflow_multiplier": "1.5000", "unallocated": "kept"}
    assert change.after == {"idle_charge_factor": "0.5000", "overflow_multiplier": "1.5000", "unallocated": "kept"}


def test_policy_updates_are_recorded_each_time(admin_user, finance_user):
    policy_update(user=finance_user, unallocated="shared")
    policy_update(user=admin_user, overflow_multiplier=Decimal("2"))
    policy_update(user=admin_user, overflow_multiplier=Decimal("2.0"))  # no change, no record
    latest, first = MoneyChange.objects.all()
    assert (first.changed_by, first.before["unallocated"], first.after["unallocated"]) == (
        finance_user, "kept", "shared")
    assert (latest.changed_by, latest.before["overflow_multiplier"], latest.after["overflow_multiplier"]) == (
        admin_user, "1.5000", "2.0000")
    assert ChargePolicy.objects.get().overflow_multiplier == 2


def test_bad_policy_values_name_the_rule(finance_user):
    with pytest.raises(ValidationError) as refused:
        policy_update(user=finance_user, idle_charge_factor=Decimal("-0.1"), overflow_multiplier=Decimal("-1"),
                      unallocated="split")
    assert problems(refused) == {"idle_charge_factor": ["must be zero or more."],
                                 "overflow_multiplier": ["must be zero or more."],
                                 "unallocated": ["must be kept or shared."]}
    assert not ChargePolicy.objects.exists() and not MoneyChange.objects.exists()


# ---- quotas ----------------------------------------------------------------------------------------------

def quota(user, team, model, first, following, hours="100", **extra):
    return quota_save(user=user, team=team, gpu_model=model, period_start=first, expires=following,
                      card_hours=Decimal(hours), **extra)


def test_quotas_are_created_changed_and_deleted_with_a_record(finance_user, team_a, h200):
    created = quota(finance_user, team_a, h200, NOVEMBER, DEC)
    quota(finance_user, team_a, h200, NOVEMBER, DEC, hours="150", quota=created)
    quota_delete(user=finance_user, quota=created)
    assert not Quota.objects.exists()
    deleted, changed, made = MoneyChange.objects.all()
    assert {change.subject for change in (deleted, changed, made)} == {f"quota {created.pk} (Team Alpha)"}
    assert made.before is None and made.after == {"team": "alpha", "gpu_model": "H200", "period_start": "2026-11-01",
                                                  "expires": "2026-12-01", "card_hours": "100.000"}
    assert (changed.before["card_hours"], changed.after["card_hours"]) == ("100.000", "150.000")
    assert deleted.after is None and deleted.before["card_hours"] == "150.000"


@pytest.mark.parametrize("following", [NOVEMBER, date(2026, 10, 1)])
def test_a_quota_expiring_on_or_before_its_start_is_refused(finance_user, team_a, following):
    with pytest.raises(ValidationError) as refused:
        quota(finance_user, team_a, None, NOVEMBER, following)
    assert problems(refused) == {"expires": ["must be after the start (period_start)."]}


def test_negative_card_hours_are_refused(finance_user, team_a):
    with pytest.raises(ValidationError) as refused:
        quota(finance_user, team_a, None, NOVEMBER, DEC, hours="-1")
    assert problems(refused) == {"card_hours": ["must be zero or more."]}


def test_overlapping_quotas_of_one_team_and_model_are_refused(finance_user, team_a, team_b, h200):
    quota(finance_user, team_a, h200, NOVEMBER, DEC)
    quota(finance_user, team_a, None, NOVEMBER, DEC)  # team-wide: another kind of quota
    quota(finance_user, team_b, h200, NOVEMBER, DEC)  # another team
    with pytest.raises(ValidationError) as refused:
        quota(finance_user, team_a, h200, date(2026, 11, 20), date(2027, 1, 1))
    assert problems(refused) == {"period_start": ["overlaps the quota 2026-11-01 – 2026-12-01 of Team Alpha for H200."]}
    with pytest.raises(ValidationError) as refused:
        quota(finance_user, team_a, None, date(2026, 10, 1), date(2026, 11, 2))
    assert problems(refused) == {"period_start": ["overlaps the team-wide quota 2026-11-01 – 2026-12-01 of Team Alpha."]}
    quota(finance_user, team_a, h200, DEC, date(2027, 1, 1))  # the next period
    assert Quota.objects.count() == 4


def test_a_quota_the_constraint_refuses_gives_the_same_error(monkeypatch, finance_user, team_a, h200):
    quota(finance_user, team_a, h200, NOVEMBER, DEC)
    real, calls = money_services._quota_overlapping, []

    def blind_first(*args):
        calls.append(1)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(money_services, "_quota_overlapping", blind_first)
    with pytest.raises(ValidationError) as refused:
        quota(finance_user, team_a, h200, date(2026, 11, 20), date(2027, 1, 1))
    assert problems(refused) == {"period_start": ["overlaps the quota 2026-11-01 – 2026-12-01 of Team Alpha for H200."]}
    assert Quota.objects.count() == 1 and MoneyChange.objects.count() == 1


# ---- who may write ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_only_admin_and_finance_write(request, who, team_a, h200):
    user = request.getfixturevalue(who)
    writes = [
        lambda: card(user, h200, NOVEMBER, None),
        lambda: energy_tariff_save(user=user, valid_from=NOVEMBER, valid_until=None, price_per_kwh=Decimal(1)),
        lambda: policy_update(user=user, idle_charge_factor=Decimal(0)),
        lambda: quota(user, team_a, None, NOVEMBER, DEC),
    ]
    for write in writes:
        with pytest.raises(PermissionDenied):
            write()
    assert not MoneyChange.objects.exists() and not ChargePolicy.objects.exists()


def test_deletes_are_refused_to_others_too(finance_user, lead_a, team_a, h200):
    created = card(finance_user, h200, NOVEMBER, None)
    made = quota(finance_user, team_a, None, NOVEMBER, DEC)
    with pytest.raises(PermissionDenied):
        rate_card_delete(user=lead_a, card=created)
    with pytest.raises(PermissionDenied):
        quota_delete(user=lead_a, quota=made)
    assert RateCard.objects.exists() and Quota.objects.exists()
