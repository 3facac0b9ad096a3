"""``make_chunks`` (client/chunking.py) refuses bad input at the call, naming what to write
instead: a step that is not a whole number above 0, a tree that is not a name, a directory
(glob it), files that are not paths."""
from __future__ import annotations

import pytest

from rhtc.client import make_chunks
from rhtc.client.data.chunks import ChunkFileError
from tests.samples import NANOAOD, needs_nanoaod

pytestmark = pytest.mark.timeout(90)     # a refused call that was not refused would wait forever


@pytest.mark.parametrize("kwargs, error, match", [
    ({"step": 2.5}, TypeError, r"step must be a whole number > 0.*not float 2.5"),
    ({"step": "5"}, TypeError, r"step must be a whole number > 0.*not str '5'"),
    ({"step": 0}, ValueError, r"step must be > 0"),
    ({"tree": 3}, TypeError, r"tree must be the name"),
], ids=["step-float", "step-str", "step-zero", "tree-int"])
@needs_nanoaod
def test_make_chunks_bad_step_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_chunks(str(NANOAOD / "nano_dy.root"), **kwargs)


@needs_nanoaod
def test_make_chunks_of_a_directory_says_to_glob():
    folder = str(NANOAOD)
    with pytest.raises(ChunkFileError, match=r"is a directory.*make_chunks\('.*\*\.root'\)") as info:
        make_chunks(folder)
    assert info.value.reason == "is a directory"


@pytest.mark.parametrize("files, match", [(5, r"files must be a path.*not int 5"),
                                          ([5], r"files holds int 5.*make_chunks\('data/\*\.root'\)")])
def test_make_chunks_files_that_are_not_paths_named(files, match):
    with pytest.raises(TypeError, match=match):
        make_chunks(files)
