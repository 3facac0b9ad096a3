"""Synthetic NanoAOD files to try things on: ``Events`` trees with CMS NanoAOD's branch
names, types and compression, millions of events when the real samples hold dozens.

:func:`make_data` (public as :func:`rhtc.make_nanoaod`) writes a dimuon set (a Z peak over
a Drell-Yan continuum, :mod:`.dimuon`); the schema is in :mod:`.schema` and the parallel
writer in :mod:`.writer`. ``bench make-data`` is its command line, and the benchmarks'
AGC samples (:mod:`bench.agcgen`) use the same writer.

    >>> from rhtc import make_nanoaod
    >>> make_nanoaod is make_data
    True
"""
from .dimuon import dimuon_fraction, make_data

__all__ = ["make_data", "dimuon_fraction"]
