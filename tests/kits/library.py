"""The broker's function libraries as Redis lists them, for the function library's tests
(tests/integration/test_function_library.py, tests/scenarios/test_scripts_as_functions_on_real_workers.py)."""
from __future__ import annotations


def libraries(storage) -> list[str]:
    """The names of the rhtc function libraries loaded in the broker, sorted."""
    return sorted(e[b"library_name"].decode() for e in
                  storage.r.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "rhtc_*"))
