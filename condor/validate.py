"""Check a submit description offline, before any schedd sees it.

The htcondor2 bindings (25.x) parse a description and expand its macros without a daemon
(``Submit(text)``, ``expand()``, ``getQArgs()``), but they have traps this module closes:

* everything after the first ``queue`` statement is silently dropped: we refuse a second one;
* ``expand()`` spins forever on recursive macros (``a = $(b)``, ``b = $(a)``): we look for
  cycles first and name them;
* ``jobs()``/``procs()`` are not implemented, so the number of jobs comes from expanding the
  queue arguments ourselves;
* a malformed ``requirements`` (or ``+Attribute``) only fails at the schedd: we parse every
  ClassAd-valued command with ``classad2``.

Example::

    >>> from rhtc.condor.validate import check_description, InvalidDescription
    >>> check_description("executable = /bin/true\\nN = 4\\nqueue $(N)\\n").count
    4
    >>> try:
    ...     check_description("a = $(b)\\nb = $(a)\\nexecutable = /bin/true\\nqueue\\n")
    ... except InvalidDescription as err:
    ...     print(err)
    the submit description's macros refer to each other in a cycle: a -> b -> a (expanding them would never end)
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Iterable, Mapping
from rhtc.errors import RhtcError

# Commands whose value is a ClassAd expression evaluated by the schedd or the startd.
EXPRESSION_COMMANDS = ("requirements", "rank", "periodic_hold", "periodic_release",
                       "periodic_remove", "on_exit_hold", "on_exit_remove", "max_retries_expr")
# $FUNC(...) forms whose first argument is not a macro name.
_NOT_MACROS = {"ENV", "RANDOM_CHOICE", "RANDOM_INTEGER", "EVAL", "CHOICE"}
_REF = re.compile(r"(?<!\$)\$([A-Za-z_]*)\(\s*([A-Za-z_][A-Za-z0-9_.]*)")
_QUEUE = re.compile(r"^\s*queue\b", re.IGNORECASE)


class InvalidDescription(ValueError, RhtcError):
    """The submit description would fail (or misbehave) at the schedd; the message says why."""


@dataclasses.dataclass
class CheckedDescription:
    """What a valid description expands to (offline, so $(ClusterId) is a placeholder)."""

    count: int
    expanded: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.expanded[key]


def logical_lines(text: str) -> list[str]:
    """The description's lines with ``\\`` continuations joined and comments dropped."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not pending and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def queue_statements(text: str) -> list[str]:
    return [line.strip() for line in logical_lines(text) if _QUEUE.match(line)]


def macro_references(value: str) -> set[str]:
    """Names of the macros a value refers to (``$(x)``, ``$(x:default)``, ``$Fnx(x)``...)."""
    return {name.lower() for func, name in _REF.findall(value or "") if func.upper() not in _NOT_MACROS}


def find_macro_cycle(macros: Mapping[str, str]) -> list[str] | None:
    """A cycle of macro references such as ``['a', 'b', 'a']``, or None."""
    graph = {k.lower(): macro_references(v) for k, v in macros.items()}
    names = {k.lower(): k for k in macros}
    state: dict[str, int] = {}          # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if state.get(node) is None:
            found = visit(node)
            if found:
                return [names.get(n, n) for n in found]
    return None


def check_expression(command: str, text: str) -> None:
    """Parse ``text`` as a ClassAd expression; raise InvalidDescription naming ``command``."""
    import classad2
    if not text.strip():
        return
    try:
        classad2.ExprTree(text)
    except Exception as err:  # classad2 raises its own ClassAdException
        raise InvalidDescription(
            f"{command} = {text!r} is not a valid ClassAd expression ({err}); the schedd would "
            "reject the job. Check the parentheses, quotes and operators "
            '(e.g. requirements = (OpSys == "LINUX") && (Memory >= 2048)).') from None


def check_description(description, *, iwd: str | os.PathLike | None = None,
                      secrets: Iterable[str] = (), check_files: bool = False) -> CheckedDescription:
    """Validate a submit description offline and return its job count and expanded commands.

    Args:
        description: the text of a submit file, or an ``htcondor2.Submit``.
        iwd: the directory relative input files are read from (for ``check_files``).
        secrets: strings that must not appear anywhere in the expanded description.
        check_files: also check that the executable and ``transfer_input_files`` exist.
    """
    from .schedd import bindings
    htcondor2 = bindings()
    text = description if isinstance(description, str) else None
    if text is not None:
        queues = queue_statements(text)
        if len(queues) > 1:
            raise InvalidDescription(
                f"the description has {len(queues)} queue statements ({'; '.join(queues)}); the "
                "htcondor bindings keep only the first and drop the rest silently. Use a single "
                "`queue N` (set N with workers=N).")
        if not queues:
            raise InvalidDescription("the description has no queue statement; end it with `queue $(workers:3)`")
    macros = dict(description) if not isinstance(description, str) else None
    if macros is None:
        # the bindings need the cycle check *before* parsing expands anything
        macros = {}
        for line in logical_lines(text):
            m = re.match(r"\s*([A-Za-z_+][A-Za-z0-9_.+]*)\s*=(.*)$", line)
            if m and not _QUEUE.match(line):
                macros[m.group(1)] = m.group(2).strip()
    cycle = find_macro_cycle(macros)
    if cycle:
        raise InvalidDescription(
            "the submit description's macros refer to each other in a cycle: "
            + " -> ".join(cycle) + " (expanding them would never end)")
    sub = description if not isinstance(description, str) else htcondor2.Submit(text)
    cycle = find_macro_cycle(dict(sub))
    if cycle:
        raise InvalidDescription(
            "the submit description's macros refer to each other in a cycle: "
            + " -> ".join(cycle) + " (expanding them would never end)")
    qargs = (sub.getQArgs() or "").strip()
    count = _queue_count(sub, qargs)
    expanded = {}
    for key in sub.keys():
        try:
            expanded[key] = sub.expand(key)
        except KeyError:      # an empty value, e.g. `transfer_output_files =`
            expanded[key] = ""
    if not expanded.get("executable"):
        raise InvalidDescription("the description has no executable")
    for key, value in expanded.items():
        low = key.lower()
        if low in EXPRESSION_COMMANDS or low.startswith("my.") or low.startswith("+"):
            check_expression(key, value)
    for secret in secrets:
        if secret and any(secret in v for v in expanded.values()):
            raise InvalidDescription(
                "the broker password or signing key would end up in the job ad; pass them in the "
                "0600 config file (transfer_input_files), never in the description")
    if check_files:
        _check_files(expanded, Path(iwd or os.getcwd()))
    return CheckedDescription(count=count, expanded=expanded)


def _queue_count(sub, qargs: str) -> int:
    if not qargs:
        return 1
    if re.search(r"\b(in|from|matching)\b", qargs, re.IGNORECASE):
        raise InvalidDescription(f"`queue {qargs}` iterates over items; workers need a plain `queue N`")
    from .schedd import bindings
    htcondor2 = bindings()
    probe = "rhtc_queue_count_probe"
    copy = htcondor2.Submit(dict(sub))     # keys cannot be deleted from a Submit
    copy[probe] = qargs
    value = copy.expand(probe).strip()
    try:
        count = int(value)
    except ValueError:
        raise InvalidDescription(f"`queue {qargs}` expands to {value!r}, not a number of jobs") from None
    if count < 1:
        raise InvalidDescription(f"`queue {qargs}` asks for {count} jobs; ask for at least one")
    return count


def _check_files(expanded: Mapping[str, str], iwd: Path) -> None:
    base = Path(expanded.get("initialdir") or iwd)
    if not base.is_absolute():
        base = iwd / base
    exe = Path(expanded["executable"])
    exe = exe if exe.is_absolute() else Path(os.getcwd()) / exe
    if not exe.is_file():
        raise InvalidDescription(f"the executable {exe} does not exist")
    missing = []
    for item in (expanded.get("transfer_input_files") or "").split(","):
        item = item.strip()
        if not item or "://" in item:
            continue
        path = Path(item) if Path(item).is_absolute() else base / item
        if not path.exists():
            missing.append(str(path))
    if missing:
        hint = ""
        if any(m.endswith(".tar.gz") for m in missing):
            hint = " (make the worker environment with `rhtc pack`)"
        if any(m.endswith(".json") for m in missing):
            hint += " (start a broker with `rhtc broker`, which writes its config file)"
        raise InvalidDescription(f"transfer_input_files names files that do not exist: "
                                 f"{', '.join(missing)}{hint}")
