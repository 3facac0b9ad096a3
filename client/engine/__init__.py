"""The map engine: one map's state and the driver that carries it out through Redis."""
