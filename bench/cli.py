"""``bench overhead | dimuon | compression | make-data``"""
from __future__ import annotations

import importlib

import click

_COMMANDS = {
    "overhead": ("bench.overhead", "overhead_command"),
    "dimuon": ("bench.dimuon", "dimuon_command"),
    "compression": ("bench.compression", "compression_command"),
    "make-data": ("bench.datagen", "make_data_command"),
    "recovery": ("bench.recovery", "recovery_command"),
    "agc": ("bench.agc", "agc_command"),
}


class _Lazy(click.Group):
    """Import each benchmark only when it runs (dask and uproot are heavy)."""

    def list_commands(self, ctx):
        return sorted(_COMMANDS)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        module, attr = _COMMANDS[name]
        return getattr(importlib.import_module(f"rhtc.{module}"), attr)   # works outside the checkout too


@click.group(cls=_Lazy, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Benchmarks of redis-htcondor beside dask.distributed and the bare loop."""


if __name__ == "__main__":
    main()
