"""The worker process (``rhtc worker`` / ``python -m rhtc.worker``).

It never imports ``client``: the two meet only through ``broker``'s protocol.
"""
