"""What a task read, on the wire (broker/wire/reads.py): any branch names and libraries
travel whole in a result's metadata, bounded (``MAX_CHARS``), or as ``TOO_MANY``, which the
run record notes as a task whose reads are not listed. No processes; what ``rhtc warm``
does with it: tests/scenarios/test_warm_fills_a_new_pool_from_a_run_record.py."""
from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from rhtc.broker.wire.reads import MAX_CHARS, TOO_MANY, decode_reads, encode_reads
from rhtc.client.data.chunks import Chunk
from rhtc.client.reports.reads import ChunkReads
from tests.helpers import examples

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
libraries = st.sampled_from(["ak", "np", "pd", "a@b", "x,y"])


@settings(max_examples=examples(200), deadline=None)
@given(own=st.lists(st.tuples(names, libraries), unique=True, max_size=6),
       other=st.lists(st.tuples(names, libraries), unique=True, max_size=6))
def test_what_a_task_read_travels_whole_and_bounded(own, other):
    """Any branch names and libraries: the text decodes to what was read (the task's own chunk
    as None when its names are plain), or is TOO_MANY, never longer than MAX_CHARS."""
    mine, theirs = Chunk("/d/a.root", "Events", 0, 10, "u1"), Chunk("/d/b,c.root", "T\tx", 5, 9, "u2")
    reads = {}
    if own:
        reads[mine.routing_key] = (mine, dict.fromkeys(own))
    if other:
        reads[theirs.routing_key] = (theirs, dict.fromkeys(other))
    text = encode_reads(reads, mine)
    assert len(text) <= MAX_CHARS
    want = [(("/d/a.root", "Events", 0, 10, "u1"), tuple(own))] if own else []
    if other:
        want.append((("/d/b,c.root", "T\tx", 5, 9, "u2"), tuple(other)))
    got = [(chunk or ("/d/a.root", "Events", 0, 10, "u1"), branches) for chunk, branches in decode_reads(text)]
    assert text == TOO_MANY or got == want


def test_a_task_that_read_too_much_says_so_and_is_noted():
    chunk = Chunk("/d/a.root", "Events", 0, 10, "u1")
    text = encode_reads({chunk.routing_key: (chunk, {(f"Branch_{i:05d}", "ak"): None for i in range(5000)})}, chunk)
    assert text == TOO_MANY
    table = ChunkReads()
    table.add(3, text, chunk)
    assert table.unlisted == [3] and len(table) == 0
