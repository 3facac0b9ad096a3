"""Benchmarks (the ``bench`` command): each prints our figures beside dask's and the
bare single-process loop's, measured in the same run, as medians and ratios."""
