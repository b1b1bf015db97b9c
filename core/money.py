"""The one currency money is kept in (``CARDHOUR_CURRENCY``, ISO 4217) and its minor unit; the one
quantize helper (DESIGN.md §5: rounded once, half-up, to the minor unit)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

# ISO 4217 codes and their minor-unit digits (the currencies a GPU cluster is likely to be billed in).
MINOR_UNITS = {
    "AUD": 2, "BRL": 2, "CAD": 2, "CHF": 2, "CNY": 2, "CZK": 2, "DKK": 2, "EUR": 2, "GBP": 2, "HKD": 2,
    "IDR": 2, "ILS": 2, "INR": 2, "JPY": 0, "KRW": 0, "MXN": 2, "MYR": 2, "NOK": 2, "NZD": 2, "PLN": 2,
    "SAR": 2, "SEK": 2, "SGD": 2, "THB": 2, "TRY": 2, "TWD": 2, "USD": 2, "VND": 0, "ZAR": 2, "AED": 2,
    "BHD": 3, "KWD": 3,
}


def currency_validator(code: str) -> None:
    if code not in MINOR_UNITS:
        raise ValidationError(
            _("%(code)s is not a known ISO 4217 currency code (e.g. CNY, USD, EUR)."), params={"code": code},
            code="unknown_currency",
        )


def quantize_money(amount: Decimal, currency: str) -> Decimal:
    """``amount`` rounded half-up to ``currency``'s minor unit."""
    return amount.quantize(Decimal(1).scaleb(-MINOR_UNITS[currency]), rounding=ROUND_HALF_UP)
