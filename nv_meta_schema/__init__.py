"""The ``.nv-meta`` format of Megatron-Energon webdatasets, as data, and a validator.

- JSON Schemas (``*.schema.json`` beside this file) for ``dataset.yaml``, ``split.yaml`` (or
  ``split.json``) and ``.info.json`` (or the legacy ``.info.yaml``): :func:`schema`.
- The SQL of ``index.sqlite`` per Energon version (``sql/energon-*.sql``): :func:`tables_sql` (the
  script a writer runs; shardstore's index writer does), :func:`sql` and :data:`LAYOUTS`.
- :func:`validate` checks a prepared dataset folder against all of them, and that the files agree
  with each other (splits name known shards, every shard has its ``.tar.idx`` of the right size).

It depends only on PyYAML, jsonschema and braceexpand, not on shardstore, so any tool can use it.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import urllib.parse
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import braceexpand
import yaml

__all__ = ["Problem", "Layout", "LAYOUTS", "schema", "sql", "tables_sql", "optional_tables_sql", "validate", "detect_layout", "brace_count"]

META_DIR = ".nv-meta"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a dataset: ``file`` relative to the dataset folder, and what is wrong."""

    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass(frozen=True, slots=True)
class Layout:
    """One version of ``index.sqlite``: the SQL file of its tables and indexes, its journal mode,
    and the tables it may lack with the SQL file that creates them.

    The SQL files hold tables and indexes only, so a writer can run one as it is: the journal
    mode is a field here, not a PRAGMA there (a writer picks its own while it loads rows).
    """

    name: str
    sql_file: str
    journal: str  # "wal" or "delete" (rollback journal)
    optional_tables: frozenset[str] = frozenset()
    optional_sql_file: str | None = None


#: The known layouts of ``index.sqlite``, oldest first.
LAYOUTS: dict[str, Layout] = {
    "energon-6.0": Layout("energon-6.0", "energon-6.0.sql", "wal"),
    "energon-7.0": Layout("energon-7.0", "energon-7.0.sql", "wal"),
    "energon-7.4": Layout(
        "energon-7.4", "energon-7.4.sql", "delete", frozenset({"media_metadata", "media_filters", "sqlite_sequence"}),
        "energon-7.4-media.sql",
    ),
}

_SCHEMAS = {"dataset": "dataset.schema.json", "split": "split.schema.json", "info": "info.schema.json"}


@cache
def schema(name: str) -> dict[str, Any]:
    """The JSON Schema ``dataset``, ``split`` or ``info`` as a dict."""
    if name not in _SCHEMAS:
        raise KeyError(f"no schema {name!r}; known: {', '.join(_SCHEMAS)}")
    loaded: dict[str, Any] = json.loads(resources.files(__package__).joinpath(_SCHEMAS[name]).read_text(encoding="utf-8"))
    return loaded


def _sql_file(name: str) -> str:
    return resources.files(__package__).joinpath("sql", name).read_text(encoding="utf-8")


@cache
def tables_sql(layout: str) -> str:
    """The tables and indexes of an ``index.sqlite`` layout (a key of :data:`LAYOUTS`), each
    column commented: what a writer of that layout runs in an empty database. No PRAGMA and none
    of the optional tables. Raises ``KeyError`` for an unknown layout."""
    return _sql_file(LAYOUTS[layout].sql_file)


@cache
def optional_tables_sql(layout: str) -> str:
    """The SQL of the tables a layout may lack (Energon 7.4: ``media_metadata`` and ``media_filters``,
    written by ``--media-metadata-by-...``); empty for a layout without any."""
    spec = LAYOUTS[layout]
    return _sql_file(spec.optional_sql_file) if spec.optional_sql_file else ""


@cache
def sql(layout: str) -> str:
    """The whole of an ``index.sqlite`` layout as one script: its journal mode, its tables and
    indexes (:func:`tables_sql`), then its optional tables. Run in an empty file, it makes a
    database of that layout with every table it may have. Raises ``KeyError`` for an unknown layout."""
    spec = LAYOUTS[layout]
    script = f"PRAGMA journal_mode = {'WAL' if spec.journal == 'wal' else 'DELETE'};\n" + tables_sql(layout)
    return script + (_sql_file(spec.optional_sql_file) if spec.optional_sql_file else "")


# --------------------------------------------------------------------------------------------------
# index.sqlite structure

_Structure = dict[str, tuple[Any, ...]]


def _structure(db: sqlite3.Connection, tables: Iterable[str]) -> _Structure:
    """Columns (name, type, not null, default, primary key) and indexes (unique, columns) per table."""
    out: _Structure = {}
    for table in tables:
        cols = tuple(tuple(r[1:]) for r in db.execute(f"PRAGMA table_info('{table}')"))
        indexes = []
        for _, name, unique, origin, partial in db.execute(f"PRAGMA index_list('{table}')"):
            columns = tuple(r[2] for r in db.execute(f"PRAGMA index_info('{name}')"))
            label = name if origin == "c" else f"<{origin}>"  # automatic indexes: named by what they serve
            indexes.append((label, unique, partial, columns))
        out[table] = (cols, tuple(sorted(indexes)))
    return out


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


@cache
def _reference(layout: str) -> tuple[set[str], _Structure]:
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(sql(layout))
        tables = _tables(db)
        return tables, _structure(db, sorted(tables))
    finally:
        db.close()


def detect_layout(db: sqlite3.Connection) -> str | None:
    """The name of the layout ``db`` matches exactly (optional tables aside), or None."""
    tables = _tables(db)
    for name, layout in LAYOUTS.items():
        ref_tables, ref = _reference(name)
        required = ref_tables - layout.optional_tables
        if not required <= tables or not tables <= ref_tables:
            continue
        if all(_structure(db, [t])[t] == ref[t] for t in tables):
            return name
    return None


def _closest_layout(db: sqlite3.Connection) -> str:
    cols = {r[1]: r[3] for r in db.execute("PRAGMA table_info('samples')")}
    if "id" in cols:
        return "energon-6.0"
    return "energon-7.4" if cols.get("tar_file_id") else "energon-7.0"


def _describe_difference(db: sqlite3.Connection, layout: str) -> list[str]:
    ref_tables, ref = _reference(layout)
    tables = _tables(db)
    optional = LAYOUTS[layout].optional_tables
    out = [f"missing table {t}" for t in sorted(ref_tables - tables - optional)]
    out += [f"unknown table {t}" for t in sorted(tables - ref_tables)]
    for t in sorted(tables & ref_tables):
        got, want = _structure(db, [t])[t], ref[t]
        if got[0] != want[0]:
            out.append(f"table {t} has columns {_cols(got[0])}, expected {_cols(want[0])}")
        if got[1] != want[1]:
            out.append(f"table {t} has indexes {_idx(got[1])}, expected {_idx(want[1])}")
    return out


def _cols(cols: tuple[Any, ...]) -> str:
    return "(" + ", ".join(f"{c[0]} {c[1]}{' NOT NULL' if c[2] else ''}{' PRIMARY KEY' if c[4] else ''}" for c in cols) + ")"


def _idx(indexes: tuple[Any, ...]) -> str:
    return "[" + ", ".join(f"{n}{' UNIQUE' if u else ''}({', '.join(c)})" for n, u, _, c in indexes) + "]"


def _validate_index(root: str, shard_counts: dict[str, int] | None) -> list[Problem]:
    rel = f"{META_DIR}/index.sqlite"
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return [Problem(rel, "missing")]
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return [Problem(rel, "not an SQLite database")]
    journal = "wal" if header[18:20] == b"\x02\x02" else "delete"
    try:
        db = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as e:
        return [Problem(rel, f"cannot open: {e}")]
    problems: list[Problem] = []
    try:
        layout = detect_layout(db)
        if layout is None:
            closest = _closest_layout(db)
            for diff in _describe_difference(db, closest):
                problems.append(Problem(rel, f"{diff} (closest layout: {closest}, see nv_meta_schema/sql)"))
            return problems
        if journal != LAYOUTS[layout].journal:
            want = "a rollback journal" if LAYOUTS[layout].journal == "delete" else "WAL"
            problems.append(Problem(rel, f"journal mode is {journal.upper()}, the {layout} layout uses {want}"))
        wal = path + "-wal"
        if os.path.exists(wal) and os.path.getsize(wal) > 0:
            problems.append(
                Problem(f"{rel}-wal", "uncommitted write-ahead log: readers that open the index immutable do not see it")
            )
        if shard_counts is not None:
            problems += _check_counts(db, rel, shard_counts)
    except sqlite3.DatabaseError as e:
        problems.append(Problem(rel, f"unreadable: {e}"))
    finally:
        db.close()
    return problems


def _check_counts(db: sqlite3.Connection, rel: str, shard_counts: dict[str, int]) -> list[Problem]:
    """Cheap agreement with .info: total samples, and tar_file_id within the shard list."""
    total, lo, hi = db.execute("SELECT COUNT(*), MIN(tar_file_id), MAX(tar_file_id) FROM samples").fetchone()
    problems = []
    want = sum(shard_counts.values())
    if total != want:
        problems.append(Problem(rel, f"{total} samples, but the info file counts {want}"))
    if total and (lo < 0 or hi >= len(shard_counts)):
        problems.append(Problem(rel, f"tar_file_id runs {lo}..{hi}, but there are {len(shard_counts)} shards"))
    return problems


# --------------------------------------------------------------------------------------------------
# YAML / JSON files


def _load(root: str, rel: str) -> tuple[Any, list[Problem]]:
    path = os.path.join(root, rel)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return None, [Problem(rel, f"cannot read: {e.strerror}")]
    try:
        return (json.loads(data) if rel.endswith(".json") else yaml.safe_load(data)), []
    except (ValueError, yaml.YAMLError) as e:
        kind = "JSON" if rel.endswith(".json") else "YAML"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, [Problem(rel, f"invalid {kind}: {first}")]


def _schema_problems(rel: str, doc: Any, name: str) -> list[Problem]:
    # Imported here: shardstore's prepare imports this package for tables_sql, and jsonschema
    # costs about 40 ms to import, a noticeable part of a small prepare.
    import jsonschema

    if not isinstance(doc, dict):  # every file is a mapping; the branches below would only add noise
        return [Problem(rel, f"top level: must be a mapping, not {type(doc).__name__}")]
    validator = jsonschema.Draft202012Validator(schema(name))
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        detail = jsonschema.exceptions.best_match(err.context) if err.context else err
        where = detail.json_path if detail.json_path != "$" else "top level"
        message = detail.message
        forbidden = detail.validator_value if detail.validator == "not" else None
        if isinstance(forbidden, dict) and list(forbidden) == ["required"]:  # {"not": {"required": [k]}}
            message = f"{', '.join(map(repr, forbidden['required']))} is not allowed in this form of the file"
        elif name == "dataset" and detail.validator == "required" and detail.validator_value == ["sample_loader"]:
            message = "a sample_type needs a field_map or a sample_loader"
        problem = Problem(rel, f"{where}: {message}")
        if problem not in out:  # a type error can show up through more than one branch
            out.append(problem)
    return out


_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE = re.compile(r"^[A-Za-z]\.\.[A-Za-z](?:\.\.-?\d+)?$")


def brace_count(pattern: str) -> int:
    """How many names ``braceexpand`` makes of ``pattern``, counted without making them: a
    sequence multiplies, a group ``{a,b}`` adds its alternatives, a range ``{x..y..s}`` counts
    its steps (an upper bound for malformed patterns, which braceexpand keeps literally)."""
    stack: list[tuple[int, int, int, bool]] = []  # open groups: (alternatives so far, outer product, start, comma seen)
    cur = 1
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append((0, cur, i, False))
            cur = 1
        elif c == "," and stack:
            alts, outer, start, _ = stack[-1]
            stack[-1] = (alts + cur, outer, start, True)
            cur = 1
        elif c == "}" and stack:
            alts, outer, start, comma = stack.pop()
            body = pattern[start + 1 : i]
            m = None if comma else _INT_RANGE.match(body)
            if m is not None:
                lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1) or 1
                size = abs(hi - lo) // abs(step) + 1
            elif not comma and _CHAR_RANGE.match(body):
                size = 58  # at most 'A'..'z'
            else:
                size = alts + cur
            cur = outer * size
        i += 1
    while stack:  # unclosed groups: count them as if closed (an upper bound)
        alts, outer, _, _ = stack.pop()
        cur = outer * (alts + cur)
    return cur


def _expand(patterns: Iterable[str]) -> list[str]:
    return [name for p in patterns for name in braceexpand.braceexpand(p)]


def _validate_info(root: str) -> tuple[dict[str, int] | None, list[Problem]]:
    problems: list[Problem] = []
    docs = {}
    for name in (".info.json", ".info.yaml"):
        rel = f"{META_DIR}/{name}"
        if os.path.isfile(os.path.join(root, rel)):
            doc, load_problems = _load(root, rel)
            problems += load_problems or _schema_problems(rel, doc, "info")
            if not load_problems:
                docs[name] = doc
    if not docs and not problems:
        return None, [Problem(f"{META_DIR}/.info.json", "missing: not a prepared dataset")]
    valid = {n: d for n, d in docs.items() if not any(p.file.endswith(n) for p in problems)}
    if len(valid) == 2 and valid[".info.json"]["shard_counts"] != valid[".info.yaml"]["shard_counts"]:
        problems.append(Problem(f"{META_DIR}/.info.yaml", "shard counts differ from .info.json (stale copy)"))
    main = valid.get(".info.json", valid.get(".info.yaml"))
    return (dict(main["shard_counts"]) if main else None), problems


def _validate_split(root: str, shard_counts: dict[str, int] | None) -> list[Problem]:
    for name in ("split.yaml", "split.json"):
        rel = f"{META_DIR}/{name}"
        if os.path.isfile(os.path.join(root, rel)):
            break
    else:
        return [Problem(f"{META_DIR}/split.yaml", "missing")]
    doc, problems = _load(root, rel)
    if problems:
        return problems
    problems = _schema_problems(rel, doc, "split")
    if problems or shard_counts is None:
        return problems
    limit = len(shard_counts) + sum(c for c in shard_counts.values() if isinstance(c, int))
    for what, patterns in [*doc["split_parts"].items(), ("exclude", doc.get("exclude") or [])]:
        count = sum(brace_count(p) for p in patterns)
        if count > limit:  # never expanded: `{0..999999999}` would take gigabytes
            problems.append(Problem(rel, f"{what}: patterns expand to {count} names, more than the dataset's shards and samples"))
    if problems:
        return problems
    try:
        for patterns in [*doc["split_parts"].values(), doc.get("exclude") or []]:
            _expand(patterns)
    except ValueError as e:  # braceexpand.UnbalancedBracesError
        return [Problem(rel, f"invalid brace pattern: {e}")]
    for split, patterns in doc["split_parts"].items():
        unknown = [s for s in _expand(patterns) if s not in shard_counts]
        if unknown:
            problems.append(Problem(rel, f"split {split!r} names shards that are not in the info file: {unknown[:3]}"))
    for entry in _expand(doc.get("exclude") or []):
        if entry not in shard_counts and not any(entry.startswith(s + "/") for s in shard_counts):
            problems.append(Problem(rel, f"exclude entry {entry!r} is neither a shard nor <shard>/<key>"))
    return problems


def _validate_dataset_yaml(root: str) -> list[Problem]:
    rel = f"{META_DIR}/dataset.yaml"
    if not os.path.isfile(os.path.join(root, rel)):
        return []  # optional: `prepare` without a sample type writes none
    doc, problems = _load(root, rel)
    if problems:
        return problems
    problems = _schema_problems(rel, doc, "dataset")
    if problems or not isinstance(doc, dict):
        return problems
    for key in ("sample_loader", "part_filter"):
        ref = doc.get(key)
        if isinstance(ref, str) and ":" in ref:
            module = ref.split(":", 1)[0]
            if not os.path.isfile(os.path.join(root, META_DIR, module)):
                problems.append(Problem(rel, f"{key} refers to {module}, which is not in {META_DIR}"))
    return problems


def _validate_uuid(root: str) -> list[Problem]:
    rel = f"{META_DIR}/index.uuid"
    try:
        with open(os.path.join(root, rel), "rb") as f:
            text = f.read().decode("ascii", "replace")
    except FileNotFoundError:
        return [Problem(rel, "missing (every prepare writes a new one)")]
    try:
        ok = len(text) == 36 and str(uuid.UUID(text)) == text
    except ValueError:
        ok = False
    return [] if ok else [Problem(rel, f"not a 36-character UUID: {text[:40]!r}")]


_SUFFIX = re.compile(r"\.[^./]*$")


def _tar_idx(shard: str) -> str:
    """``<shard>.tar.idx``: the shard's last suffix replaced, as Energon's ``with_suffix``."""
    return _SUFFIX.sub("", shard) + ".tar.idx"


def _validate_shards(root: str, shard_counts: dict[str, int]) -> list[Problem]:
    problems = []
    for shard, count in shard_counts.items():
        if not os.path.isfile(os.path.join(root, shard)):
            problems.append(Problem(shard, "shard listed in the info file is missing"))
            continue
        idx = _tar_idx(shard)
        try:
            size = os.path.getsize(os.path.join(root, idx))
        except OSError:
            problems.append(Problem(idx, "missing (Energon's reader needs it; `prepare --tar-index-only` rewrites it)"))
            continue
        if size != 8 * (count + 1):
            problems.append(Problem(idx, f"{size} bytes, expected {8 * (count + 1)} for {count} samples"))
    return problems


def validate(dataset_dir: str | os.PathLike[str]) -> list[Problem]:
    """Check a prepared dataset folder; returns the problems found (an empty list: valid).

    Checks ``.info.json``/``.info.yaml``, ``split.yaml``/``split.json`` and ``dataset.yaml`` against
    their JSON Schemas, ``index.sqlite`` against the layouts of Energon 6.0, 7.0 and 7.4 (tables,
    columns, constraints, indexes, journal mode), ``index.uuid``, and that the files agree: splits
    and excludes name known shards, the index holds as many samples as the info file counts, every
    shard exists with a ``.tar.idx`` of ``count + 1`` offsets. Reads no shard contents.
    """
    root = os.fspath(dataset_dir)
    if not os.path.isdir(os.path.join(root, META_DIR)):
        return [Problem(META_DIR, "missing: not a prepared dataset")]
    shard_counts, problems = _validate_info(root)
    problems += _validate_split(root, shard_counts)
    problems += _validate_dataset_yaml(root)
    problems += _validate_index(root, shard_counts)
    problems += _validate_uuid(root)
    if shard_counts is not None:
        problems += _validate_shards(root, shard_counts)
    return problems
