"""Human byte sizes, read exactly as gpud and gpudctl read them (``gpud_proto::parse_size``).

``12GiB``, ``512MiB``, ``1.5GiB``, ``4096``: a number (integer, or decimal with at most nine
decimals) and an optional unit, case-insensitive: ``B``; binary ``KiB``, ``MiB``, ``GiB``,
``TiB`` and their bare forms ``K``, ``M``, ``G``, ``T``; decimal ``KB``, ``MB``, ``GB``, ``TB``.
Spaces around the number and between number and unit are allowed. Results past 2^64 − 1 are
refused.
"""

from __future__ import annotations

from typing import Union

from .errors import InvalidRequest

__all__ = ["U64_MAX", "Size", "parse_size", "to_bytes", "format_size"]

#: The largest value a size (or any unsigned field) can take on the wire.
U64_MAX = (1 << 64) - 1

#: A size as the API accepts it: bytes as an int, or a string such as ``"12GiB"``.
Size = Union[int, str]

_UNITS = {
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1_000_000,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1_000_000_000,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1_000_000_000_000,
    "tib": 1 << 40,
}

_DIGITS = "0123456789"


def _ascii_lower(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def parse_size(text: str) -> int:
    """Bytes in ``text``; :class:`~gpud.InvalidRequest` (a ``ValueError``) when unreadable."""

    def fail(why: str) -> InvalidRequest:
        return InvalidRequest(
            f"invalid size {text!r}: {why} (examples: 12GiB, 512MiB, 1.5GiB, 4096)"
        )

    s = text.strip()
    split = next((i for i, c in enumerate(s) if not (c in _DIGITS or c == ".")), len(s))
    number, unit = s[:split], s[split:]
    if not number:
        raise fail("no number")
    unit = _ascii_lower(unit.strip())
    if unit:
        if unit not in _UNITS:
            raise fail("unknown unit")
        multiplier = _UNITS[unit]
    else:
        multiplier = 1
    if "." in number:
        whole_text, frac = number.split(".", 1)
        if "." in frac:
            raise fail("more than one decimal point")
        whole = int(whole_text) if whole_text else 0
        if whole > U64_MAX:
            raise fail("number too large")
        if len(frac) > 9:
            raise fail("too many decimals")
        frac_digits = int(frac) if frac else 0
        whole_bytes = whole * multiplier
        if whole_bytes > U64_MAX:
            raise fail("size too large")
        scale: int = 10 ** len(frac)
        total = whole_bytes + frac_digits * multiplier // scale
        if total > U64_MAX:
            raise fail("size too large")
        return total
    n = int(number)
    if n > U64_MAX:
        raise fail("number too large")
    if n * multiplier > U64_MAX:
        raise fail("size too large")
    return n * multiplier


def to_bytes(size: Size, what: str = "size") -> int:
    """Bytes from an int (0 to 2^64 − 1) or a size string; :class:`~gpud.InvalidRequest`
    otherwise (``bool`` is refused: ``vram=True`` is a mistake, not one byte)."""
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise InvalidRequest(
            f"{what} must be bytes (an int) or a size such as '12GiB', not {size!r}"
        )
    if isinstance(size, str):
        return parse_size(size)
    if size < 0 or size > U64_MAX:
        raise InvalidRequest(f"{what} {size} is out of range (0 to 2^64 - 1 bytes)")
    return size


def format_size(n: int) -> str:
    """``12.0 GiB``, ``512.0 MiB``, ``100 B``: as gpudctl shows sizes."""
    names = ["B", "KiB", "MiB", "GiB", "TiB"]
    value = float(n)
    unit = 0
    while value >= 1024.0 and unit + 1 < len(names):
        value /= 1024.0
        unit += 1
    if unit == 0:
        return f"{n} B"
    return f"{value:.1f} {names[unit]}"
