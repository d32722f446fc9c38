"""Sizes are read exactly as gpud_proto::parse_size reads them (proto/src/size.rs)."""

from __future__ import annotations

import pytest

import gpud
from gpud.sizes import U64_MAX, to_bytes


@pytest.mark.parametrize(
    "text, expected",
    [
        # proto/src/size.rs's own cases
        ("12GiB", 12 << 30),
        ("512MiB", 512 << 20),
        ("512 mib", 512 << 20),
        ("1.5GiB", 3 << 29),
        ("4096", 4096),
        ("2G", 2 << 30),
        ("1GB", 1_000_000_000),
        ("0", 0),
        # the rest of the unit table, case and spaces
        ("1b", 1),
        ("1K", 1024),
        ("1kb", 1000),
        ("1KiB", 1024),
        ("3m", 3 << 20),
        ("1MB", 1_000_000),
        ("1t", 1 << 40),
        ("1TB", 10**12),
        ("2TiB", 2 << 40),
        ("  1 KiB  ", 1024),
        ("0.5KiB", 512),
        ("1.", 1),
        (".5GiB", 1 << 29),
        (".", 0),
        ("1.999999999B", 1),
        ("18446744073709551615", U64_MAX),
        ("16777215.999999999TiB", 16777215 * (1 << 40) + (999999999 * (1 << 40)) // 10**9),
    ],
)
def test_sizes_parse_as_gpudctl_parses_them(text: str, expected: int) -> None:
    assert gpud.parse_size(text) == expected


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "no number"),
        ("GiB", "no number"),
        ("12 parsecs", "unknown unit"),
        ("1.2.3GiB", "more than one decimal point"),
        ("99999999999999999999", "number too large"),
        ("20000000TiB", "size too large"),
        ("1.0000000001GiB", "too many decimals"),
        ("18446744073709551616", "number too large"),
        ("-1", "no number"),
        ("1 GiB extra", "unknown unit"),
        ("1ГиБ", "unknown unit"),
    ],
)
def test_bad_sizes_are_invalid_requests_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(gpud.InvalidRequest) as e:
        gpud.parse_size(text)
    assert "invalid size" in str(e.value) and why in str(e.value)
    assert e.value.code == "invalid_request"
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("bad", [True, False, -1, 1 << 64, 1.5, None, b"1GiB"])
def test_sizes_as_values_are_ints_in_range_or_strings(bad: object) -> None:
    with pytest.raises(gpud.InvalidRequest):
        to_bytes(bad)  # type: ignore[arg-type]


def test_ints_and_strings_are_both_sizes() -> None:
    assert to_bytes(0) == 0
    assert to_bytes(U64_MAX) == U64_MAX
    assert to_bytes("12GiB") == 12 << 30


def test_sizes_display_as_gpudctl_shows_them() -> None:
    assert gpud.format_size(12 << 30) == "12.0 GiB"
    assert gpud.format_size(512 << 20) == "512.0 MiB"
    assert gpud.format_size(100) == "100 B"
