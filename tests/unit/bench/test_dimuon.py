"""``bench dimuon`` (bench/dimuon.py) refuses zero workers, ours or dask's, as a usage
error naming the option, never a ZeroDivisionError. No processes: the command stops at
its options."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("option", ["--workers", "--dask-workers"])
def test_bench_dimuon_refuses_zero_workers(tmp_path, option):
    from click.testing import CliRunner
    from rhtc.bench.dimuon import dimuon_command
    result = CliRunner().invoke(dimuon_command, [option, "0", "--files", "1", "--events", "100", "--no-dask",
                                                 "--repeats", "1", "--data-dir", str(tmp_path / "data"),
                                                 "--json", str(tmp_path / "b.json"), "--no-progress"])
    assert result.exit_code == 2, result.output + repr(result.exception)
    assert option in result.output and "0" in result.output
    assert not isinstance(result.exception, ZeroDivisionError)
