"""NanoEvents kept on the worker that holds a chunk: a warm rerun pays only the processing.

coffea builds NanoEvents for every item: it walks the tree's ~1000 branches into a form
(``_extract_base_form``), lets the schema (``NanoAODSchema``) turn that into collections and
cross-references, and builds an awkward array of virtual buffers over the whole form
(``ak.from_buffers``). Once the branches come from the worker's cache, that construction is
the largest cost of a warm AGC item. While coffea's per-item function runs on a worker,
:func:`events_kept` stands in for ``NanoEventsFactory`` in coffea's executor module: when
the item reads through :func:`~client.data.coffea_items.worker_cache` from a file the worker
holds open, what construction produces is kept in the worker's byte-capped cache (under the
chunk, so it is advertised, routed to and evicted with the chunk's branches), and the next
item on the same chunk gets it without building anything. A cold item of another file with
the same branches builds from the tree's base form kept from an earlier file
(:func:`branch_signature`, :func:`_from_root_kept_form`; tests/unit/client/data/test_coffea_events.py).

**What is kept, and why that level.** Measured on the largest AGC chunk (29,365 events,
947 branches, buffers already in the cache, CPU seconds, medians of 7): the tree's type
names 0.008, the base form 0.027, the schema 0.016, ``ak.from_buffers`` 0.024, all of
``from_root`` + ``events()`` 0.079 s; keeping the form (or the schema) alone saves
0.051 s of it and keeping the factory saves the same (its ``events()`` rebuilds the
array), while keeping the built array's layout saves all of it: a new ``ak.Array`` over a
kept layout takes microseconds. Materialized arrays are not kept here: they are the
branch cache's buffers already (and keeping them in the layout too would hold them past
their eviction). Processing over a kept layout costs what it costs over a fresh one
(0.228 vs 0.228 s, CPU medians of 10, with or without awkward's caching of materialized
buffers in the layout). So what is kept is the factory with its schema and source mapping
and the **layout of the built events**, whose virtual buffers never cache what they
materialize (``enable_virtualarray_caching=False``): every buffer is read through the
mapping, that is through the item's own buffer cache, access log and file.

**Keyed by everything that changes it**: the version of the file as the worker holds it
open (:mod:`client.data.freshness`: a file rewritten in place, even with its UUID, is a new
key), the chunk (UUID, tree, entry range), the tree path and entries asked for, the schema
class and its class-level options (``NanoAODSchema.warn_missing_crossrefs = False``,
``mixins``...), the item's metadata (its ``usermeta`` too), ``iteritems_options``, the
preloaded branches, and the coffea, awkward and uproot versions.

**Counted**: ~4.2-4.6 kB per layout node (form, schema, mapping and the layout itself,
measured with tracemalloc on six NanoAOD files, 268 to 1675 branches, NanoAODSchema and
BaseSchema), so :data:`NODE_BYTES` per node, plus any preloaded arrays, is charged against
the cache's cap; an AGC chunk's events count ~5 MB.

**A warm answer is the cold answer.** Each item, cold or warm, gets a new ``ak.Array`` over
a new top record (the kept layout's collections below it are shared: awkward never changes
a layout in place), with its own ``attrs``, its own factory (``attrs["@events_factory"]``,
whose ``events()`` gives this item's array) and its own metadata dict (``events.metadata``
is the dict coffea built for the item, as coffea hands it, with the schema's additions):
``events["x"] = ...``, ``events.metadata["k"] = ...`` or a change to ``events.attrs`` stays
in that item. The buffers are the branch cache's, read-only on every run (see
:mod:`worker.frozen`). The behaviour dict is the schema's module-level one, shared by every
item exactly as under coffea's own executors. What is not isolated is a write into awkward's
internals (``events.Jet.layout.content.parameters[...] = ...``), as with any shared layout.
While an item runs, the kept mapping is bound to that item's access log (coffea's
``savemetrics`` ``columns``: a buffer served from the cache logs nothing, as with coffea's
own cache), buffer cache and open file; afterwards it lets go of the log and the file.

    >>> events_kept_key("v1", "u:Events:0-10", "Events", 0, 10, BaseSchema, {"dataset": "a"},
    ...                 {}, None)[:36]
    'v1|u:Events:0-10|nanoevents|Events|0'
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import pickle
import warnings
import types
import weakref
from functools import partial
from typing import Any, Iterator

import awkward as ak
import uproot

try:
    import coffea
    import coffea.processor.executor as _executor_module
    from coffea.nanoevents import BaseSchema, NanoEventsFactory
    from coffea.nanoevents.factory import TrivialUprootOpener, _key_formatter, _reads_podio_metadata
    from coffea.nanoevents.mapping import UprootSourceMapping
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("rhtc.coffea needs coffea: pip install 'redis-htcondor[coffea]'") from err

#: Bytes charged per node of a kept events layout (measured: 4.2-4.6 kB, see the module's notes).
NODE_BYTES = 5000
#: The library versions a kept layout was built with (part of every key).
VERSIONS = (coffea.__version__, ak.__version__, uproot.__version__)
#: The from_root arguments coffea's per-item function passes; any other one: built as coffea does.
_UNDERSTOOD = {"treepath", "schemaclass", "metadata", "access_log", "mode", "entry_start", "entry_stop",
               "iteritems_options", "preload", "buffer_cache"}


def events_kept_key(version: str, tag: str, treepath: Any, entry_start: Any, entry_stop: Any, schemaclass: type,
                    metadata: Any, iteritems_options: Any, preload: Any) -> str | None:
    """The cache key of one chunk's NanoEvents built with these arguments (None when an
    argument cannot be pinned down, e.g. metadata that does not pickle: then nothing is kept).

    >>> a = events_kept_key("v1", "u:Events:0-10", "Events", 0, 10, BaseSchema, {"d": 1}, {}, None)
    >>> a == events_kept_key("v1", "u:Events:0-10", "Events", 0, 10, BaseSchema, {"d": 1}, {}, None)
    True
    >>> a == events_kept_key("v2", "u:Events:0-10", "Events", 0, 10, BaseSchema, {"d": 1}, {}, None)
    False
    >>> a == events_kept_key("v1", "u:Events:0-10", "Events", 0, 10, BaseSchema, {"d": 2}, {}, None)
    False
    """
    try:
        what = pickle.dumps((_schema_options(schemaclass), metadata, iteritems_options,
                             sorted(preload) if preload is not None else None, VERSIONS), protocol=4)
    except Exception:
        return None
    digest = hashlib.blake2b(what, digest_size=12).hexdigest()
    return f"{version}|{tag}|nanoevents|{treepath}|{entry_start}-{entry_stop}|{digest}"


def _schema_options(schemaclass: type) -> tuple:
    """The schema class by name, with its class-level settings (not its methods)."""
    options = []
    for klass in schemaclass.__mro__:
        for name, value in vars(klass).items():
            if name.startswith("__") or callable(value) or isinstance(
                    value, (classmethod, staticmethod, property, types.FunctionType, type)):
                continue
            options.append((klass.__qualname__, name, value))
    return f"{schemaclass.__module__}.{schemaclass.__qualname__}", options


class KeptEvents:
    """What NanoEvents construction produced from one chunk, as the worker keeps it: the
    factory (schema and source mapping) and the built events' layout, whose buffers are
    all virtual and read through the mapping."""

    def __init__(self, factory: NanoEventsFactory, layout: Any, metadata_before: Any, nbytes: int):
        after = layout.parameters.get("metadata")
        # what the schema did to the item's metadata (NanoAODSchema adds "version"), to do again
        before = metadata_before if isinstance(metadata_before, dict) else {}
        self.schema_set = copy.deepcopy({k: v for k, v in (after or {}).items()
                                         if k not in before or before[k] is not v})
        self.schema_removed = [k for k in before if k not in (after or {})] if isinstance(after, dict) else []
        # the kept layout holds a copy of the metadata: no item's dict (which its processor
        # may change) stays in it
        self.layout = layout.copy(parameters={**layout.parameters, "metadata": copy.deepcopy(after)})
        self.factory, self.nbytes = factory, nbytes
        self.items_served = 0          # how many items got these events (1: built for this one)

    @classmethod
    def build(cls, factory: NanoEventsFactory, metadata_before: Any) -> "KeptEvents":
        """Build the events' layout as ``factory.events()`` does, but with virtual buffers
        that never cache what they materialize."""
        form = factory._schema.form
        layout = ak.from_buffers(form=form, length=len(factory), container=factory._mapping,
                                 buffer_key=partial(_key_formatter, factory._partition_key), backend="cpu",
                                 byteorder=ak._util.native_byteorder, allow_noncanonical_form=False,
                                 enable_virtualarray_caching=False, highlevel=False)
        nbytes = NODE_BYTES * _nodes(layout) + _preloaded_bytes(factory._mapping)
        return cls(factory, layout, metadata_before, nbytes)

    def metadata_for(self, metadata: Any) -> Any:
        """The item's own metadata dict as the schema leaves it (coffea hands the item's
        dict itself to ``events.metadata``); a copy of the kept one when the item has none."""
        if not isinstance(metadata, dict):
            return copy.deepcopy(self.layout.parameters.get("metadata"))
        for k in self.schema_removed:
            metadata.pop(k, None)
        for k, v in self.schema_set.items():
            if metadata.get(k, _MISSING) is not v:
                metadata[k] = copy.deepcopy(v)
        return metadata

    def bind(self, file: Any, treepath: Any, access_log: Any, buffer_cache: Any) -> None:
        """Read the kept layout's buffers through this item's cache, log and open file."""
        mapping = self.factory._mapping
        mapping._access_log, mapping._buffer_cache, mapping._file_handle = access_log, buffer_cache, file
        mapping._cache = _TreeOnDemand(mapping, file, treepath)

    def unbind(self) -> None:
        """Let go of the finished item's log and file (its buffer cache view stays: a lazy
        array the item returned can still be read through it)."""
        mapping = self.factory._mapping
        mapping._access_log, mapping._file_handle, mapping._cache = None, None, {}


_MISSING = object()


class _TreeOnDemand(dict):
    """The mapping's column sources: the item's tree, looked up in its open file only when a
    buffer is not in the cache (a fully warm item never touches the file)."""

    def __init__(self, mapping: Any, file: Any, treepath: Any):
        super().__init__()
        self.mapping, self.file, self.treepath = mapping, file, treepath

    def __missing__(self, key: str) -> Any:
        tree = self.file[self.treepath]
        from coffea.nanoevents.util import tuple_to_key
        if key != self.mapping.key_root() + tuple_to_key((str(tree.file.uuid), tree.object_path)):
            raise KeyError(key)
        self[key] = tree
        return tree


class ItemFactory(NanoEventsFactory):
    """The factory one item sees: the kept schema and mapping, and ``events()`` giving this
    item's own array over the kept layout (the same array while the item holds it, as
    coffea's factory does)."""

    def __init__(self, kept: KeptEvents, metadata: Any):
        base = kept.factory
        super().__init__(base._schema, base._mapping, base._partition_key, mode="virtual")
        self.kept, self._metadata = kept, metadata
        kept.items_served += 1

    def events(self):
        events = self._events()
        if events is None:
            events = _hand_out(self, self.kept, self._metadata)
            self._events = weakref.ref(events)
        return events


def _hand_out(factory: ItemFactory, kept: KeptEvents, metadata: Any) -> ak.Array:
    """A new array over a new top record of the kept layout, with the item's metadata and
    its own attrs."""
    layout = kept.layout
    metadata = kept.metadata_for(metadata)
    top = layout.copy(parameters={**(layout.parameters or {}), "metadata": metadata})
    form = factory._schema.form
    form = dict(form, parameters={**form.get("parameters", {}), "metadata": metadata})
    return ak.Array(top, behavior=factory._schema.behavior(),
                    attrs={"@events_factory": factory, "@form": form,
                           "@buffer_key": partial(_key_formatter, factory._partition_key)})


def _nodes(layout: Any) -> int:
    count, stack = 0, [layout]
    while stack:
        node = stack.pop()
        count += 1
        contents = getattr(node, "contents", None)
        if contents is None and hasattr(node, "content"):
            contents = [node.content]
        stack.extend(contents or ())
    return count


def _preloaded_bytes(mapping: Any) -> int:
    total = 0
    for value in (getattr(mapping, "preloaded_arrays", None) or {}).values():
        total += int(getattr(getattr(value, "_array", value), "nbytes", 0) or 0)
    return total


def _where(file: Any, buffer_cache: Any) -> tuple[Any, str, str] | None:
    """(cache, chunk, file version) when this item reads through the worker's cache from a
    file the worker holds open (the only case in which anything is kept), else None."""
    view = getattr(buffer_cache, "view", None)
    cache, tag, version = getattr(view, "cache", None), getattr(view, "tag", None), getattr(view, "version", None)
    if not (tag and version and callable(getattr(cache, "keep", None))
            and isinstance(file, uproot.reading.ReadOnlyDirectory)):
        return None
    if str(file.file.uuid) != tag.split(":", 1)[0]:
        return None
    return cache, tag, version


#: The leaf classes whose interpretation is their type, title and count leaf (NanoAOD's).
_PLAIN_LEAVES = frozenset({"TLeafB", "TLeafS", "TLeafI", "TLeafL", "TLeafF", "TLeafD", "TLeafO"})
#: Every member of such a leaf but its value range (fMinimum, fMaximum: no part of its form).
_LEAF_MEMBERS = ("fName", "fTitle", "fLen", "fLenType", "fOffset", "fIsRange", "fIsUnsigned")


def branch_signature(tree: Any) -> str | None:
    """What a tree's base form is made of, as a digest: each branch's name and title and
    its leaves' types, titles and count leaves, and the tree's title. Trees with the same
    signature (the files of one production) have the same base form; None for a tree with
    anything but plain ``TBranch``/``TLeaf`` branches (NanoAOD's), or where uproot has custom
    interpretations registered: their forms are always built from the tree."""
    if getattr(uproot.interpretation.identify, "_registered_interpretations", None) \
            or not isinstance(tree, uproot.behaviors.TTree.TTree) or tree.aliases:
        return None
    parts: list = [tree.classname, tree.title]
    for branch in tree.branches:
        if branch.classname != "TBranch" or len(branch.branches):
            return None
        leaves = []
        for leaf in branch.member("fLeaves"):
            if leaf.classname not in _PLAIN_LEAVES:
                return None
            count = leaf.member("fLeafCount")
            leaves.append((leaf.classname, *(leaf.member(m) for m in _LEAF_MEMBERS),
                           None if count is None else (count.classname, count.member("fName"))))
        parts.append((branch.name, branch.title, leaves))
    return hashlib.blake2b(pickle.dumps((parts, VERSIONS), protocol=4), digest_size=16).hexdigest()


def _from_root_kept_form(file: Any, kwargs: dict, cache: Any) -> NanoEventsFactory | None:
    """``NanoEventsFactory.from_root`` in virtual mode with the tree's base form (and type
    names) kept in the worker's cache across files with the same :func:`branch_signature`
    (working them out is most of a cold item's NanoEvents construction); built as coffea
    builds them otherwise. None (coffea's own ``from_root`` then) for anything unusual."""
    schemaclass, treepath = kwargs.get("schemaclass", BaseSchema), kwargs.get("treepath")
    if kwargs.get("preload") is not None or kwargs.get("iteritems_options") or not isinstance(treepath, str) \
            or _reads_podio_metadata(schemaclass):
        return None
    tree = file[treepath]
    signature = branch_signature(tree)
    if signature is None:
        return None
    key = f"nanoevents-form|{signature}"
    text = cache.kept(key)
    if not isinstance(text, str):
        typenames = tree.typenames()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            base_form = UprootSourceMapping._extract_base_form(tree)
        for w in caught:            # coffea's own warnings (skipped branches), and nothing kept
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        text = json.dumps([base_form, typenames])
        if not caught:
            cache.keep(key, text, len(text) + 200, None)
    base_form, typenames = json.loads(text)      # a new form for every item: the schema changes it
    base_form["typenames"] = typenames
    start, stop = kwargs.get("entry_start"), kwargs.get("entry_stop")
    start = 0 if start is None or start < 0 else start
    stop = tree.num_entries if stop is None or stop > tree.num_entries else stop
    partition_key = (str(tree.file.uuid), tree.object_path, f"{start}-{stop}")
    mapping = UprootSourceMapping(TrivialUprootOpener({partition_key[0]: tree.file.file_path}, {}), start, stop,
                                  cache={}, access_log=kwargs.get("access_log"), file_handle=file, use_ak_forth=True,
                                  virtual=True, buffer_cache=kwargs.get("buffer_cache"))
    mapping.preload_column_source(partition_key[0], partition_key[1], tree)
    return NanoEventsFactory._from_mapping(mapping, partition_key, base_form, schemaclass, kwargs.get("metadata"),
                                           mode="virtual")


class KeepNanoEvents:
    """Stands in for ``NanoEventsFactory`` in coffea's executor module while an item runs on
    a worker: ``from_root`` gives the item a factory over the chunk's kept events (building
    and keeping them the first time); anything else is coffea's own."""

    def __init__(self) -> None:
        self.bound: list[KeptEvents] = []
        self.built = self.reused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(NanoEventsFactory, name)

    def from_root(self, file, **kwargs):
        where = _where(file, kwargs.get("buffer_cache"))
        if where is None or set(kwargs) - _UNDERSTOOD or kwargs.get("mode", "virtual") != "virtual" \
                or callable(kwargs.get("preload")):
            return NanoEventsFactory.from_root(file, **kwargs)
        cache, tag, version = where
        metadata = kwargs.get("metadata")
        key = events_kept_key(version, tag, kwargs.get("treepath"), kwargs.get("entry_start"),
                              kwargs.get("entry_stop"), kwargs.get("schemaclass", BaseSchema), metadata,
                              kwargs.get("iteritems_options", {}), kwargs.get("preload"))
        if key is None:
            return NanoEventsFactory.from_root(file, **kwargs)
        kept = cache.kept(key)
        if isinstance(kept, KeptEvents):
            kept.bind(file, kwargs.get("treepath"), kwargs.get("access_log"), kwargs.get("buffer_cache"))
            self.reused += 1
        else:
            before = dict(metadata) if isinstance(metadata, dict) else metadata
            factory = _from_root_kept_form(file, kwargs, cache) or NanoEventsFactory.from_root(file, **kwargs)
            try:
                kept = KeptEvents.build(factory, before)
            except Exception:        # e.g. metadata that cannot be copied: coffea's own, not kept
                return factory
            cache.keep(key, kept, kept.nbytes, tag)
            kept.bind(file, kwargs.get("treepath"), kwargs.get("access_log"), kwargs.get("buffer_cache"))
            self.built += 1
        self.bound.append(kept)
        return ItemFactory(kept, metadata)

    def unbind(self) -> None:
        for kept in self.bound:
            kept.unbind()
        self.bound.clear()


@contextlib.contextmanager
def events_kept() -> Iterator[KeepNanoEvents | None]:
    """While coffea runs one item here, its NanoEvents come from (and go into) the worker's
    cache; yields the stand-in (None when this coffea builds NanoEvents some other way)."""
    if getattr(_executor_module, "NanoEventsFactory", None) is not NanoEventsFactory:
        yield None
        return
    stand_in = KeepNanoEvents()
    _executor_module.NanoEventsFactory = stand_in
    try:
        yield stand_in
    finally:
        _executor_module.NanoEventsFactory = NanoEventsFactory
        stand_in.unbind()
