"""Sizes and durations as people write them (broker/wire/amounts.py): every unit, upper or
lower case, with spaces and exponents; what is
not an amount refused saying how to write one; the unbounded readers give what the text says
(inf for a huge exponent), the parsers bound it. A size or duration printed in its largest
whole unit reads back as itself (a hypothesis round trip). That the parsers never return
inf, nan or a negative amount, for any input: tests/unit/broker/wire/test_settings.py."""
from __future__ import annotations

import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.broker.wire.amounts import (LARGEST_SIZE, SECONDS, UNITS, mib, parse_duration, parse_size, read_duration,
                                      read_size)
from tests.helpers import examples

SETTINGS = settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True,
                    database=None)


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_every_size_unit_reads_in_any_case(unit):
    for written in (f"3{unit}", f"3 {unit.lower()}", f" 3{unit.title()} "):
        assert parse_size(written) == 3 * UNITS[unit]


@pytest.mark.parametrize("unit", sorted(SECONDS))
def test_every_duration_unit_reads_in_any_case(unit):
    assert parse_duration(f"2.5{unit}") == parse_duration(f"2.5 {unit.upper()}") == 2.5 * SECONDS[unit]


@pytest.mark.parametrize("text, want", [("1KiB", 1024), ("1MiB", 2 ** 20), ("1GiB", 2 ** 30), ("1TiB", 2 ** 40),
                                        ("1PiB", 2 ** 50), ("1KB", 1000), ("1PB", 10 ** 15), ("1.5GiB", 1.5 * 2 ** 30), (".5K", 500), ("2e3", 2000),
                                        ("1E2KB", 100_000), ("7", 7)])
def test_decimals_and_exponents_read(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "GB", "4 GB B", "4XB", "-4GB", "four", "1,5G", "0x10"])
def test_what_is_not_a_size_is_refused_saying_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"cannot read .* as a size: use e\.g\. 4GB, 512MB, 2GiB"):
        read_size(text)


@pytest.mark.parametrize("text", ["8x", "20 minutes", "1w", "-5s", "h"])
def test_what_is_not_a_duration_is_refused_saying_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"cannot read .* as a duration: use e\.g\. 8h, 20m, 90s, 2d"):
        read_duration(text)


def test_the_readers_say_what_the_text_says_and_the_parsers_bound_it():
    assert read_size("1e400") == math.inf and read_duration("1e400d") == math.inf
    assert parse_size(LARGEST_SIZE) == LARGEST_SIZE
    with pytest.raises(ValueError, match="beyond what a byte count holds"):
        parse_size(LARGEST_SIZE + 1)
    assert parse_duration(threading.TIMEOUT_MAX) == threading.TIMEOUT_MAX
    with pytest.raises(ValueError, match="beyond what a process can wait"):
        parse_duration("1000000d")
    with pytest.raises(ValueError):
        parse_size(-1)


def test_a_number_is_taken_as_bytes_or_seconds_and_a_bool_is_not():
    assert parse_size(512) == 512 and parse_duration(1.5) == 1.5
    with pytest.raises(ValueError):
        parse_size(True)


@SETTINGS
@given(st.integers(0, 10 ** 6), st.sampled_from(["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"]))
def test_a_size_written_in_a_unit_reads_back_as_its_bytes(n, unit):
    assert parse_size(f"{n}{unit}") == n * int(UNITS[unit.upper()])


@SETTINGS
@given(st.integers(0, 10 ** 5), st.sampled_from(sorted(SECONDS)))
def test_a_duration_written_in_a_unit_reads_back_as_its_seconds(n, unit):
    assert parse_duration(f"{n}{unit}") == n * SECONDS[unit]


@pytest.mark.parametrize("n, text", [(0, "0.0 MiB"), (2 ** 20, "1.0 MiB"), (1.5 * 2 ** 30, "1536.0 MiB"),
                                     (520e6, "495.9 MiB")])
def test_a_size_is_said_in_mib(n, text):
    assert mib(n) == text
