"""``bench overhead | dimuon | compression | make-data | recovery | chaos | agc | pool | merge | scale | affinity``"""
from __future__ import annotations

import importlib

import click

_COMMANDS = {
    "overhead": ("rhtc.bench.overhead", "overhead_command"),
    "dimuon": ("rhtc.bench.dimuon", "dimuon_command"),
    "compression": ("rhtc.bench.compression", "compression_command"),
    "make-data": ("rhtc.bench.datagen", "make_data_command"),
    "recovery": ("rhtc.bench.recovery", "recovery_command"),
    "chaos": ("rhtc.bench.chaos", "chaos_command"),
    "agc": ("rhtc.bench.agc", "agc_command"),
    "pool": ("rhtc.bench.pool", "pool_command"),
    "merge": ("rhtc.bench.merge", "merge_command"),
    "scale": ("rhtc.bench.scale", "scale_command"),
    "affinity": ("rhtc.bench.affinity", "affinity_command"),
}


class _Lazy(click.Group):
    """Import each benchmark only when it runs (dask and uproot are heavy)."""

    def list_commands(self, ctx):
        return sorted(_COMMANDS)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        module, attr = _COMMANDS[name]
        return getattr(importlib.import_module(module), attr)   # works outside the checkout too


@click.group(cls=_Lazy, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Benchmarks of redis-htcondor beside dask.distributed and the bare loop."""


if __name__ == "__main__":
    main()
