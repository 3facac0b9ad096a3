"""The documentation site builds strictly (``make docs``: sphinx-build -W --keep-going -n),
its generated reference says what the code says, and the strictness itself holds: a broken
link in a copy of the docs fails the build."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")


def _build(src: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                           "-d", str(out / ".doctrees"), str(src), str(out / "html")],
                          capture_output=True, text=True, timeout=600)


def _copy_docs(tmp_path: Path) -> Path:
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build", "figures", "__pycache__"))
    return src


def test_the_key_table_lists_every_key_of_broker_keys():
    from rhtc.broker.wire.keys import TEMPLATES
    from rhtc_docgen import keys
    problems: list[str] = []
    page = keys.page(DOCS, problems.append)
    assert problems == []
    for name, template in TEMPLATES.items():
        assert f"| `{name}` | `{template}` |" in page, f"{name} ({template}) is missing from the key table"
    assert all(row[3] != "(not described in broker/wire/keys.py)" for row in keys.key_rows())


def test_a_key_without_a_description_is_a_build_warning(monkeypatch):
    from rhtc.broker.wire import keys as broker_keys
    from rhtc_docgen import keys
    monkeypatch.setitem(broker_keys.TEMPLATES, "undocumented", "{ns}:nobody-wrote-this:{map_id}")
    problems: list[str] = []
    keys.page(DOCS, problems.append)
    assert len(problems) == 1 and "nobody-wrote-this" in problems[0]


def test_the_settings_page_has_every_setting_with_its_default():
    import dataclasses
    from rhtc.broker.wire.settings import Settings
    from rhtc_docgen import settings
    page = settings.page(DOCS, lambda m: pytest.fail(m))
    for f in dataclasses.fields(Settings):
        assert f"`{Settings.env_name(f.name)}`" in page


@pytest.mark.heavy     # builds the whole site (~10-20 s: autodoc imports the library)
@pytest.mark.timeout(600)
def test_the_site_builds_strictly(tmp_path):
    got = _build(DOCS, tmp_path)
    assert got.returncode == 0, f"make docs fails:\n{got.stderr[-5000:]}"
    html = tmp_path / "html"
    for page in ("index", "benchmarks", "reference/api", "reference/keys", "reference/settings",
                 "reference/task-states", "reference/errors"):
        assert (html / f"{page}.html").exists(), page
    assert "rhtc.remote_map" in (html / "reference" / "api.html").read_text()


#: each breakage, what it writes into a copy of the docs, and what the build's warning names
BREAKAGES = {
    "a link to a page that does not exist": ("index.md", "\nSee [the missing page](no-such-page.md).\n", "no-such-page"),
    "a link to a heading that does not exist": ("index.md", "\nSee [a heading](reference/keys.md#no-such-heading).\n",
                                                "no-such-heading"),
    "a page in no toctree": ("orphan-page.md", "# An orphan\n\nIn no toctree.\n", "orphan-page"),
}


@pytest.fixture(scope="module")
def broken_build(tmp_path_factory) -> subprocess.CompletedProcess:
    """One build of a copy of the docs with every breakage at once: under ``-W --keep-going``
    each is a warning reported on its own (and any warning fails the build), so one build
    tells what three would, for a third of the time."""
    tmp = tmp_path_factory.mktemp("broken-site")
    src = _copy_docs(tmp)
    for page, text, _ in BREAKAGES.values():
        path = src / page
        path.write_text((path.read_text() if path.exists() else "") + text)
    return _build(src, tmp / "out")


@pytest.mark.heavy
@pytest.mark.timeout(600)
@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_broken_link_fails_the_build(broken_build, breakage):
    named = BREAKAGES[breakage][2]
    assert broken_build.returncode != 0, "the build with broken links passed"
    warnings = [line for line in broken_build.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert any(named in line for line in warnings), f"{breakage} was not reported:\n{broken_build.stderr[-3000:]}"
