"""A reader's Python session on a pool's submit node: runs one page's blocks, in order, in one
namespace, and writes what happened as JSON. tests/docs/test_pool_examples.py runs it inside
the HTCondor pool, as the pool's user, with the workers' Python and environment (functions
travel by value and only run on the Python X.Y that made them, so the client must run the
workers' X.Y, as docs/htcondor.md tells its readers)::

    python3 pool_client.py BLOCKS.json RESULT.json

BLOCKS.json: ``{"page": "docs/htcondor.md", "blocks": [{"line": 107, "code": "..."}]}``.
RESULT.json: ``{"ran": [107, ...], "failed": null}`` or ``"failed": {"line": N, "error": traceback}``.
Exit status 0 when every block ran, 1 when one failed (the rest are not run). Standard library only.
"""
from __future__ import annotations

import json
import sys
import traceback


def run_blocks(page: str, blocks: list[dict]) -> dict:
    """Execute each block's code in one namespace; stop at the first that raises."""
    namespace: dict = {"__name__": "__main__"}
    ran: list[int] = []
    for block in blocks:
        # pad with newlines so that a traceback names the block's own line on the page
        code = compile("\n" * block["line"] + block["code"], page, "exec")
        try:
            exec(code, namespace)
        except BaseException:
            return {"ran": ran, "failed": {"line": block["line"], "error": traceback.format_exc()}}
        ran.append(block["line"])
    return {"ran": ran, "failed": None}


def main(argv: list[str]) -> int:
    spec = json.loads(open(argv[1]).read())
    result = run_blocks(spec["page"], spec["blocks"])
    with open(argv[2], "w") as fh:
        json.dump(result, fh)
    return 0 if result["failed"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
