"""The errors an analyst meets (client/errors.py) are documented: every reason a
``ChunkFileError`` can give is in docs/troubleshooting.md's ChunkFileError section."""
from __future__ import annotations

from rhtc.client.data.chunks import ChunkFileError
from tests.conftest import ROOT

TROUBLESHOOTING = (ROOT / "docs" / "troubleshooting.md").read_text()


def test_every_reason_is_documented_in_troubleshooting():
    section = TROUBLESHOOTING.split("## Files: `ChunkFileError`", 1)[1].split("\n## ", 1)[0]
    missing = [r for r in ChunkFileError.REASONS if f"`{r}`" not in section]
    assert not missing, f"reasons not in docs/troubleshooting.md's ChunkFileError section: {missing}"
