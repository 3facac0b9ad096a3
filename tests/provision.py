"""What the full suite runs besides the package, made ready once per machine: ``make test-deps``.

* the HTCondor pool's trixie chroot (``tests/pools/condor_pool.py``; debootstrap, about two
  minutes from nothing; ``$RHTC_POOL_CACHE``);
* the Slurm cluster's Debian packages (``tests/pools/slurm_pool.py``; apt-get when missing);
* the toxiproxy server (``rhtc.bench.toxiproxy``; ``go install``; ``$RHTC_CACHE/tools``);
* coffea's source distribution, whose executor tests run on ``RedisExecutor``
  (``tests/kits/coffea_sdist.py``; ``$RHTC_CACHE/tools``).

These are the machine's, not the checkout's: they outlive a clone, as the installed pools
would on a facility's machine. ``make test`` makes whatever is missing when a test first
needs it, so this step is never required; CI runs it before ``make test`` (from empty
caches) and times the two apart. The four are independent and run at once; each says how
long it took, and any that failed says why (the exit status is then 1). Nothing here is
project code: the worker packs, which are, are built by the tests that test them.

By hand: ``python -m tests.provision`` (``--only condor,toxiproxy`` for some of them).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Callable


def _condor() -> str:
    from tests.pools.common import require_root
    from tests.pools.condor_pool import SUITE, build_chroot, cache_root
    require_root("the HTCondor test pool")
    seconds = build_chroot(cache_root() / SUITE, log=lambda msg: print(f"  {msg}", flush=True))
    return f"{cache_root() / SUITE} ({'built' if seconds else 'already built'})"


def _slurm() -> str:
    from tests.pools.common import ensure_debian_packages, require_root
    from tests.pools.slurm_pool import COMMANDS, PACKAGES
    require_root("the Slurm test cluster")
    ensure_debian_packages(PACKAGES, COMMANDS)
    return " ".join(PACKAGES)


def _toxiproxy() -> str:
    from rhtc.bench.toxiproxy import toxiproxy_binary
    return str(toxiproxy_binary())


def _coffea() -> str:
    from tests.kits.coffea_sdist import unpacked_sdist
    return str(unpacked_sdist())


STEPS: dict[str, Callable[[], str]] = {
    "condor": _condor, "slurm": _slurm, "toxiproxy": _toxiproxy, "coffea": _coffea,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.provision", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(STEPS),
                        help=f"comma-separated, of: {', '.join(STEPS)} (default: all)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        parser.error(f"unknown step(s) {unknown}: choose among {', '.join(STEPS)}")
    results: dict[str, tuple[bool, str, float]] = {}

    def run(name: str) -> None:
        t0 = time.monotonic()
        try:
            results[name] = (True, STEPS[name](), time.monotonic() - t0)
        except Exception as err:            # each says why; the others go on
            results[name] = (False, f"{type(err).__name__}: {err}", time.monotonic() - t0)

    threads = [threading.Thread(target=run, args=(n,), name=f"provision-{n}") for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in names:
        ok, what, seconds = results[name]
        print(f"test-deps: {name:<9} {'ready' if ok else 'FAILED'} in {seconds:5.1f} s: {what}", flush=True)
    failed = [n for n in names if not results[n][0]]
    if failed:
        print(f"test-deps: {', '.join(failed)} failed (above); their tests will try again and skip or fail "
              "saying why", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
