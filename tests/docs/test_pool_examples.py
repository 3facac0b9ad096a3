"""The pages whose examples need a pool (``<!-- requires: condor -->``) run whole against the
suite's real HTCondor pool (tests/pools/): as a reader runs them, in a Python session on the
pool's submit node, after the page's shell steps.

What the reader has done by then (the page's ``bash`` blocks, which are not run), done here:
``rhtc broker`` (the suite's pool broker, its config at ``~/.config/rhtc/broker.json`` and
``$RHTC_CONFIG``, so it is the default), ``rhtc pack`` (``rhtc-env.tar.gz``), ``mkdir -p rhtc-logs`` and ``condor_submit
condor/workers.sub workers=2``, in a directory of the pool's shared filesystem that holds the
examples' ``data/generated/*.root``. The session runs the workers' Python (functions travel by
value and only run on the Python X.Y that made them) with the pack's packages and the [condor]
extra's bindings (tests/docs/pool_client.py runs the blocks). Every job submitted from that
directory, the page's own included, is removed at the end.

Without a pool the test skips, saying why; under ``$RHTC_REQUIRE_POOLS`` or ``$CI`` it fails
(tests/pools/fixtures.py). This module is in tests/parallel.py's ``condor-pool`` group.
"""
from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.docs.examples import PAGES, POOLS, blocks, pool_of
from tests.pools.common import wait_for
from tests.pools.condor_pool import POOL_UID, POOL_USER
from tests.pools.fixtures import REPO, job_logs, make_owned_dir, wait_workers

CLIENT = Path(__file__).with_name("pool_client.py")
WORKERS_SUB = REPO / "condor" / "workers.sub"
#: the workers the reader started with ``condor_submit`` before the page's blocks
READER_WORKERS = 2
#: the pools a page may require whose pages this module runs (a test function each)
WIRED = ("condor",)


def _pages(pool: str) -> list[str]:
    return [p for p in PAGES if pool_of(p) == pool]


def test_every_pool_a_page_requires_is_wired():
    """A page that requires a pool nobody brings up would never run: say so (quick tier)."""
    assert set(WIRED) <= set(POOLS)
    unwired = {p: pool_of(p) for p in PAGES if pool_of(p) and pool_of(p) not in WIRED}
    assert not unwired, (f"{unwired}: no test runs these pages' blocks; wire the pool in "
                         "tests/docs/test_pool_examples.py as condor is")


@pytest.fixture(scope="module")
def docs_pool_client(condor_pool):
    """The reader's Python environment on the submit node: a ``rhtc pack`` for the pool's
    Python with the htcondor bindings (``extra=["htcondor"]``: the [condor] extra), unpacked
    in the pool's shared directory, readable by the pool's user."""
    from rhtc.condor.pack import pack_environment
    version = condor_pool.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip()
    path = pack_environment(python_version=version, extra=["htcondor"])
    env_dir = condor_pool.shared / "docs-client-env"
    env_dir.mkdir()
    with tarfile.open(path) as tar:
        tar.extractall(env_dir)
    for d, _, files in os.walk(env_dir):
        os.chmod(d, 0o755)
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)
    return env_dir


def _reader_home(condor_pool, pool_broker, condor_env_pack, docs_data, page: str) -> Path:
    """The directory the reader works in, after the page's shell steps (all owned by the pool's
    user, on the filesystem the pool's jobs see at the same path)."""
    home = condor_pool.workdir("docs-" + Path(page).stem)
    shutil.copytree(docs_data / "data", home / "data")
    make_owned_dir(home / ".config" / "rhtc")
    pool_broker.config.write(home / ".config" / "rhtc" / "broker.json")       # what `rhtc broker` writes
    os.link(condor_env_pack, home / "rhtc-env.tar.gz")                        # `rhtc pack`
    (home / "rhtc-logs").mkdir()                                              # `mkdir -p rhtc-logs`
    # the reader's HTCondor credential (as `condor_token_fetch` leaves it): the PyPI bindings in
    # their notebook authenticate to the schedd with it (their FS method fails in this chroot)
    token = condor_pool.run(["condor_token_create", "-identity", f"{POOL_USER}@{condor_pool.uid_domain}"],
                            user=None).stdout.strip()
    tokens = home / ".condor" / "tokens.d"
    tokens.mkdir(parents=True)
    (tokens / "pool").write_text(token + "\n")
    (tokens / "pool").chmod(0o600)
    tokens.chmod(0o700)
    for d, dirs, files in os.walk(home):
        for name in [d, *(os.path.join(d, x) for x in dirs + files)]:
            os.chown(name, POOL_UID, POOL_UID)
    return home


def _reader_env(home: Path, client_env: Path) -> dict:
    """The reader's shell: their home, the broker's config named by ``$RHTC_CONFIG`` too (what
    client, workers.sub and submit read first), their HTCondor token (HTCondor finds ``~`` in
    the password file, which is the cached chroot's, not this home) and their notebook's Python."""
    return {"HOME": str(home), "RHTC_CONFIG": str(home / ".config" / "rhtc" / "broker.json"),
            "_CONDOR_SEC_TOKEN_DIRECTORY": str(home / ".condor" / "tokens.d"),
            "PYTHONPATH": f"{client_env}/src:{client_env}/site"}


def _in_shell(env: dict, *argv: str) -> list[str]:
    """``argv`` run with ``env`` (through env(1): CondorPool.run's own ``env=`` would go to its
    ``cd``, not to the command, when ``cwd=`` is given too)."""
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv]


def _submitted_from(home: Path) -> str:
    return f'Iwd == "{home}"'


@pytest.mark.pool
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", _pages("condor"))
def test_condor_page_examples_run(page, request, condor_pool, pool_broker, condor_env_pack, docs_pool_client, docs_data):
    home = _reader_home(condor_pool, pool_broker, condor_env_pack, docs_data, page)
    env = _reader_env(home, docs_pool_client)
    out = condor_pool.run(_in_shell(env, "condor_submit", "-terse", str(WORKERS_SUB), f"workers={READER_WORKERS}"),
                          cwd=str(home)).stdout
    cluster = int(out.strip().splitlines()[-1].split(" - ")[0].split(".")[0])
    expected = [f"condor-{cluster}.{i}@" for i in range(READER_WORKERS)]
    names: list[str] = []
    try:
        try:
            names = wait_workers(pool_broker.config, lambda live: all(any(x.startswith(e) for x in live)
                                                                     for e in expected),
                                 240, what=f"the reader's {READER_WORKERS} condor workers to register")
        except TimeoutError as err:
            raise AssertionError(f"{err}\n{job_logs(home / 'rhtc-logs')}") from None
        _run_page(condor_pool, page, home, env, request)
    finally:
        condor_pool.run(["condor_rm", "-constraint", _submitted_from(home)], check=False)
    mine = [n for n in names if n.startswith(f"condor-{cluster}.")]
    wait_workers(pool_broker.config, lambda live: not set(mine) & set(live), 90,
                 what=f"the reader's workers (cluster {cluster}) to leave the broker")
    wait_for(lambda: not condor_pool.jobs(_submitted_from(home)), 60, what=f"the jobs submitted from {home} to leave")


def _run_page(condor_pool, page: str, home: Path, env: dict, request) -> None:
    """Run the page's blocks in the reader's session (tests/docs/pool_client.py), in order;
    a block that fails fails the test, naming its line and showing it."""
    code, sources, skip_next = [], {}, False
    for block in blocks(page):
        marker = block.source.strip()
        if marker.startswith("<!--"):
            assert marker.replace(" ", "") == "<!--skip:next-->", \
                f"{page}, line {block.line}: a pool page supports only `<!-- skip: next -->`, not {marker}"
            skip_next = True
            continue
        if not skip_next:
            code.append({"line": block.line, "code": str(block.example.parsed)})
            sources[block.line] = block.source
        skip_next = False
    assert code, f"{page} has no block to run"
    spec, result = home / "docs-blocks.json", home / "docs-result.json"
    spec.write_text(json.dumps({"page": page, "blocks": code}))
    proc = condor_pool.run(_in_shell(env, "python3", str(CLIENT), str(spec), str(result)), user=POOL_USER,
                           cwd=str(home), check=False, timeout=900)
    got = json.loads(result.read_text()) if result.exists() else None
    if got is not None and got["failed"] is not None:
        line = got["failed"]["line"]
        raise AssertionError(f"{page}, the block at line {line} failed (in the pool's Python, on the submit "
                             f"node):\n{got['failed']['error']}\n{sources[line]}\n--- its output:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    assert proc.returncode == 0 and got is not None, \
        f"{page}: the reader's session failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert got["ran"] == [c["line"] for c in code]
    request.node.add_report_section("call", "the reader's session", proc.stdout[-3000:])
