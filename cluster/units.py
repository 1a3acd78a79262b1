"""Sizes in rack specs: ``"64MiB"`` in, bytes out, and bytes back to ``"64 MiB"`` for people.

Memory sizes are written by people (``memory = "512MiB"``) but used by the fabric as exact byte
counts, so parsing is strict: a number, an optional unit from a short fixed list, and a result that
is a whole number of bytes. Anything else (``"12 parsecs"``, ``"1.5B"``, ``-1``) is refused with a
message that lists the units, because a size silently read as something else maps a segment of the
wrong size. Binary (``KiB`` = 1024) and decimal (``KB`` = 1000) units are both accepted and kept
distinct, as in the IEC convention; the unit's letters are case-insensitive (``mib`` = ``MiB``)
since nobody means millibytes.

Arithmetic uses :class:`decimal.Decimal`, not floats, so ``"1.1GB"`` is exactly 1,100,000,000 bytes.

A memory's occupancy is shown by :func:`fmt_mem` (``"41 % 3.3/8 MiB"``), one format for the live
dashboard and the end-of-run summary, so the two never show the same bytes differently (they did:
``64 B/512 MiB`` beside ``0/512 MiB``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["UNITS", "parse_size", "format_size", "fmt_bytes", "fmt_mem"]

# Unit -> bytes. Keys are lower-case; the canonical spelling is given by _CANONICAL.
_CANONICAL = ("B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB")
UNITS = {
    "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)\s*$")


def parse_size(value) -> int:
    """Bytes of ``value``: a non-negative ``int`` (bytes) or a string like ``"64MiB"``/``"1.5 GB"``.

    Raises ``ValueError`` with a message that says what is accepted (the caller prefixes the file
    and the key).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a size: an integer number of bytes or a string like \"64MiB\" "
                         f"(units {', '.join(_CANONICAL)})")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must be a size >= 0 bytes")
        return value
    m = _SIZE_RE.match(value.replace("_", ""))
    if not m:
        raise ValueError(f"not a size: write a number and a unit like \"64MiB\" (units {', '.join(_CANONICAL)})")
    number, unit = m.group(1), m.group(2)
    mult = UNITS.get(unit.lower() if unit else "b")
    if mult is None:
        raise ValueError(f"unknown size unit {unit!r}: use one of {', '.join(_CANONICAL)}")
    try:
        total = Decimal(number) * mult
    except InvalidOperation:  # pragma: no cover - the regex admits only decimal numbers
        raise ValueError(f"not a number: {number!r}") from None
    if total != total.to_integral_value():
        raise ValueError("is not a whole number of bytes")
    return int(total)


def format_size(n: int, *, exact: bool = False) -> str:
    """``n`` bytes in the largest binary unit that keeps it readable: ``"512 MiB"``, ``"1.5 GiB"``.

    Exact when the size is a multiple of the unit; otherwise rounded to one decimal (for messages
    and the dashboard, never read back). ``exact=True`` picks the largest unit that divides ``n``
    instead (``"1028 KiB"``), for a limit the user must meet to the byte.
    """
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            if n % mult == 0:
                return f"{n // mult} {unit}"
            if not exact:
                return f"{n / mult:.1f} {unit}"
    return f"{n} B"


# -- for people: dashboard cells and summary lines -------------------------------------------------


def _num(x: float) -> str:
    """Up to one decimal, none when it is zero: 3.3, 8, 12.5, 256."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def fmt_bytes(n: int | None) -> str:
    """A byte count in B/KiB/MiB/GiB ("1.5 MiB"); "–" for None."""
    if n is None:
        return "–"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{_num(n / div)} {unit}"
    return f"{n} B"


def fmt_mem(used: int | None, capacity: int | None) -> str:
    """Occupancy of a memory: "41 % 3.3/8 MiB" (both figures in the capacity's unit), or
    "1 % 8.2 MiB/1 GiB" when the used part would round to 0 in the capacity's unit."""
    if not capacity:
        return "–"
    used = used or 0
    unit, div = next(((u, d) for u, d in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
                      if capacity >= d), ("B", 1))
    share = f"{100 * used / capacity:.0f} %"
    if used and _num(used / div) == "0":
        return f"{share} {fmt_bytes(used)}/{_num(capacity / div)} {unit}"
    return f"{share} {_num(used / div)}/{_num(capacity / div)} {unit}"
