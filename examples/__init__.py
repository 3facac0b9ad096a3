"""Runnable analyses written against the public API only (``from rhtc import ...``)."""
