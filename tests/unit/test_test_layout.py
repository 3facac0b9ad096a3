"""The tests mirror the code (tests/README.md): every core module (broker/, worker/, client/,
condor/, rhtc/; not ``__init__``, ``__main__``) has its mirrored test file,
``tests/unit/<folder>/test_<module>.py`` (``tests/unit/test_<module>.py`` for
``rhtc/<module>.py``) or ``tests/integration/test_<module>.py``, or one line in
tests/mirrors.txt that says where its tests are or why it has none. The list stays exact:
each line names a module that exists and test files that exist, and a module that has its
mirrored file has no line (the line went stale). Read from the files, nothing imported."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
CORE = ("broker", "worker", "client", "condor", "rhtc")
LIST = "tests/mirrors.txt"
#: a test file as a line names it, relative to tests/
TEST_FILE = re.compile(r"\b(?:unit|integration|scenarios|docs)/[\w/]+\.py\b")
#: ``<module>  <test files, comma-separated, or none>: <what they test, or why none>``
LINE = re.compile(r"(?P<module>\S+\.py)  (?P<where>none|\S+\.py(?:, \S+\.py)*): (?P<what>\S.*)")


def core_modules(root: Path) -> list[str]:
    """The core modules of the checkout at ``root``, as paths from it (``broker/leases.py``)."""
    return sorted(p.relative_to(root).as_posix() for folder in CORE for p in (root / folder).rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def mirrored_files(module: str) -> list[str]:
    """Where the mirrored test file of ``module`` may be, as paths from the checkout."""
    folder, _, name = module.rpartition("/")
    stem = name[:-len(".py")]
    unit = f"tests/unit/test_{stem}.py" if folder == "rhtc" else f"tests/unit/{folder}/test_{stem}.py"
    return [unit, f"tests/integration/test_{stem}.py"]


def has_mirror(root: Path, module: str) -> bool:
    return any((root / p).is_file() for p in mirrored_files(module))


def read_list(root: Path) -> tuple[dict[str, re.Match], list[str]]:
    """The list's lines by module, and what is wrong with its form (a line that does not read,
    a module twice, the lines out of order)."""
    lines, wrong = {}, []
    for n, text in enumerate((root / LIST).read_text().splitlines(), 1):
        if not text.strip() or text.startswith("#"):
            continue
        m = LINE.fullmatch(text)
        if m is None:
            wrong.append(f"{LIST}:{n} does not read as '<module>  <test files or none>: <what>': {text!r}")
        elif m["module"] in lines:
            wrong.append(f"{LIST}:{n} names {m['module']} a second time")
        else:
            lines[m["module"]] = m
    if list(lines) != sorted(lines):
        wrong.append(f"{LIST}: the lines are not in the order of their modules")
    return lines, wrong


def unlisted(root: Path) -> list[str]:
    """Core modules with neither a mirrored test file nor a line."""
    listed, _ = read_list(root)
    return [m for m in core_modules(root) if not has_mirror(root, m) and m not in listed]


def not_modules(root: Path) -> list[str]:
    """Lines whose module is no core module."""
    modules = set(core_modules(root))
    return [m for m in read_list(root)[0] if m not in modules]


def missing_test_files(root: Path) -> list[str]:
    """Test files a line names (in where its tests are, or in what it says) that do not exist."""
    return [f"{module}: tests/{path}" for module, m in read_list(root)[0].items()
            for path in TEST_FILE.findall(m.group(0)[len(module):]) if not (root / "tests" / path).is_file()]


def stale(root: Path) -> list[str]:
    """Lines of modules that have their mirrored test file."""
    return [m for m in read_list(root)[0] if has_mirror(root, m)]


def test_every_core_module_has_its_mirrored_test_file_or_a_line():
    missing = unlisted(ROOT)
    assert not missing, (f"write the mirrored test file ({', '.join(mirrored_files(missing[0]))}), or add a line "
                         f"to {LIST} saying where the tests of these modules are or why there are none: {missing}")


def test_every_line_names_a_core_module():
    gone = not_modules(ROOT)
    assert not gone, f"{LIST} names modules that do not exist: remove or rename their lines: {gone}"


def test_every_test_file_a_line_names_exists():
    gone = missing_test_files(ROOT)
    assert not gone, f"{LIST} names test files that do not exist: {gone}"


def test_a_module_with_its_mirrored_test_file_has_no_line():
    both = stale(ROOT)
    assert not both, f"these modules have their mirrored test file: remove their lines from {LIST}: {both}"


def test_the_list_reads_one_line_per_module_in_order():
    _, wrong = read_list(ROOT)
    assert not wrong, wrong


# -- the checks themselves, on a checkout made here ------------------------------------------
@pytest.fixture
def checkout(tmp_path) -> Path:
    """broker/a.py (mirrored), broker/wire/b.py (listed), rhtc/c.py (mirrored, the package
    top's convention), worker/d.py (mirrored by an integration file) and a test file to name."""
    for path in ("broker/__init__.py", "broker/a.py", "broker/wire/b.py", "rhtc/c.py", "rhtc/__init__.py",
                 "worker/d.py", "worker/__main__.py", "tests/unit/broker/test_a.py", "tests/unit/test_c.py",
                 "tests/integration/test_d.py", "tests/scenarios/test_e.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    return tmp_path


def _list(root: Path, *lines: str) -> None:
    (root / LIST).write_text("# the list\n" + "".join(f"{line}\n" for line in lines))


B = "broker/wire/b.py  scenarios/test_e.py: what it does end to end"


def test_the_checks_pass_on_a_checkout_that_mirrors_its_code(checkout):
    _list(checkout, B)
    assert core_modules(checkout) == ["broker/a.py", "broker/wire/b.py", "rhtc/c.py", "worker/d.py"]
    assert (unlisted(checkout), not_modules(checkout), missing_test_files(checkout), stale(checkout)) == \
        ([], [], [], [])
    assert read_list(checkout)[1] == []


def test_a_module_without_a_mirrored_file_or_a_line_is_named(checkout):
    _list(checkout)
    assert unlisted(checkout) == ["broker/wire/b.py"]
    (checkout / "tests/unit/test_c.py").unlink()
    assert unlisted(checkout) == ["broker/wire/b.py", "rhtc/c.py"]


def test_a_line_of_a_module_that_does_not_exist_is_named(checkout):
    _list(checkout, "broker/gone.py  none: constants only", B)
    assert not_modules(checkout) == ["broker/gone.py"]


def test_a_line_that_names_a_test_file_that_does_not_exist_is_named(checkout):
    _list(checkout, "broker/wire/b.py  scenarios/test_e.py, unit/test_x.py: see also integration/test_y.py")
    assert missing_test_files(checkout) == ["broker/wire/b.py: tests/unit/test_x.py",
                                            "broker/wire/b.py: tests/integration/test_y.py"]


def test_a_line_of_a_module_that_has_its_mirrored_file_is_stale(checkout):
    _list(checkout, "broker/a.py  none: a re-export", B, "worker/d.py  none: an entry point")
    assert stale(checkout) == ["broker/a.py", "worker/d.py"]


@pytest.mark.parametrize("line", ["broker/wire/b.py scenarios/test_e.py: one space", "broker/wire/b.py  none:",
                                  "broker/wire/b.py  scenarios/test_e.py", "broker/wire/b.py  somewhere: why"])
def test_a_line_that_does_not_read_is_named(checkout, line):
    _list(checkout, line)
    assert read_list(checkout)[1][0].startswith(f"{LIST}:2 does not read")


def test_a_module_twice_or_out_of_order_is_named(checkout):
    _list(checkout, B, "broker/a.py  none: x", B)
    assert read_list(checkout)[1] == [f"{LIST}:4 names broker/wire/b.py a second time",
                                      f"{LIST}: the lines are not in the order of their modules"]
