"""The text Canal gives a DECIMAL column value (Column.value).

Canal's binlog decoder turns MySQL's binary DECIMAL into a digit string and hands it to ``new BigDecimal``;
LogEventConvert then prints ``toPlainString()``, which gives back the same digits. So the text is whatever
the decoder wrote, and the decoder does not always write ``scale`` fraction digits:

- MySQL stores the fraction in 4-byte words of nine digits, then one shorter word for the ``scale % 9``
  digits left over. The decoder always writes the nine digits of each full word, zeros included, but the
  left-over word only when it is not zero.
- When that leaves no fraction digit at all, it writes a single ``0``.
- The integer part has no leading zeros (``0`` when it is zero); scale 0 has no point.
- A zero is never negative (BigDecimal has no ``-0``).

So DECIMAL(12,2) prints 1.00 as ``1.0`` and 1.50 as ``1.50``; DECIMAL(20,10) prints 1 as ``1.000000000``
(the full word) and 1.0000000001 with all ten digits; DECIMAL(20,9) and DECIMAL(30,18) always print all
their fraction digits. MySQL itself always prints exactly ``scale`` digits (docs/type-mapping.md).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

__all__ = ["decimal_formatter", "decimal_text"]

DIGITS_PER_WORD = 9  # MySQL's binary DECIMAL: nine decimal digits per 4-byte word


def decimal_text(value: Any, scale: int) -> str:
    """Canal's Column.value for ``value`` read from a DECIMAL column of ``scale`` fraction digits.

    A value with more fraction digits than ``scale`` (not something a binlog holds) keeps them all:
    nothing is rounded away. Anything but a finite Decimal prints as ``str``."""
    if not isinstance(value, Decimal) or not value.is_finite():
        return str(value)
    whole, _, frac = format(value.copy_abs(), "f").partition(".")  # abs() would round to 28 digits
    width = max(scale, len(frac))
    if not width:
        return f"-{whole}" if value < 0 else whole
    frac = frac.ljust(width, "0")
    full = width // DIGITS_PER_WORD * DIGITS_PER_WORD
    rest = frac[full:]
    digits = frac[:full] + (rest if rest.strip("0") else "")
    return f"{'-' if value < 0 else ''}{whole}.{digits or '0'}"


def decimal_formatter(scale: int) -> Callable[[Any], str]:
    """``decimal_text`` for one column's scale."""

    def text(value: Any) -> str:
        return decimal_text(value, scale)

    return text
