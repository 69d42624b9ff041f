"""What importing shardstore costs, and which way its modules import each other.

``import shardstore`` must stay cheap and must not need an optional extra: it may not import s3fs,
torch or a FUSE binding (DESIGN section 2, STYLE). Checked in a fresh interpreter, since this test
process has long imported them all.

Imports flow one way (DESIGN section 2): storage -> tarscan/keys -> index/nvmeta -> prepare/dataset
-> metadataset/filestores -> mount/torch/convert/cli. The second test reads every module's source
and fails on an import from a later stage, lazy ones inside functions included; imports under
``if TYPE_CHECKING:`` are for annotations only and do not count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shardstore"

#: Optional extras: none of them may be imported by ``import shardstore``.
OPTIONAL = ("s3fs", "boto3", "aiobotocore", "torch", "mfusepy", "fuse", "PIL", "h5py", "pyarrow", "av")

#: Each module's stage in the chain; modules the chain does not name sit where their users need them
#: (errors below everything; samples, decode and sharding below dataset, which imports them).
#: ``nv_meta_schema`` has no stage: it is a separate package below the whole chain (it imports nothing
#: of shardstore, checked below), so any stage may import it; the index writer does, lazily, for its SQL.
STAGES = {
    "errors": 0,
    "humanize": 0,  # byte sizes and counts for the summary lines: imports nothing
    "_tarwalk": 0,  # the optional compiled header walk (_tarwalk.c): imports nothing
    "_fusefast": 0,  # the optional compiled FUSE read/list helper (_fusefast.c): imports nothing
    "_unitfloat": 0,  # the optional compiled frame cast (_unitfloat.c): imports nothing
    "compiled": 0,  # loads the optional compiled helpers by name: imports none of shardstore statically
    "storage": 1,
    "tarscan": 2,
    "keys": 2,
    "index": 3,
    "nvmeta": 3,
    "metaswap": 3,  # the .nv-meta swap: lock, exchange, recovery
    "snapshot": 3,  # a reader pinned to one index generation
    "shardprint": 2,  # a shard's fingerprint at prepare, checked by readers after a copy
    "samples": 3,
    "decode": 3,
    "safepickle": 2,  # the restricted unpickler (decode's pickle opt-in, the episode-frame layout)
    "sharding": 3,
    "media": 3,  # media metadata probes and tables: used by scan (4), read by dataset and the stores
    "loaders": 3,  # a dataset's own sample_loader, run by decode on request
    "jsonl": 4,  # JSONL datasets, beside dataset
    "duplicates": 4,  # --fix-duplicates, beside prepare
    "media_prepare": 4,  # prepare-media, beside prepare
    "scan": 4,
    "executors": 2,  # concurrent.futures executors for prepare (local, Dask)
    "resume": 4,  # saved shard scans of an interrupted prepare
    "update": 4,  # prepare --update: which shards changed, the rows of the rest
    "prepare": 4,
    "dataset": 4,
    "metadataset": 5,
    "filestores": 5,
    "episodes": 5,
    "inspection": 6,
    "checks": 6,
    "mount": 6,
    "torch": 6,
    "lerobot_dataset": 6,  # the drop-in for LeRobotDataset, over torch.py and the episode view
    "convert": 6,
    "edit": 6,  # episode-level edits of the store (DESIGN section 2: beside convert)
    "cli": 6,
    "resources": 0,  # close() and with-blocks: imports nothing
    "bufferpool": 0,  # large arrays taken back when freed (the LeRobot drop-in's float frames): imports nothing
    "membercheck": 2,  # the headers before a member's data (tarscan's level)
    "member_reads": 4,  # Dataset's reads by member name (a part of dataset)
    "__init__": 7,  # the package itself re-exports from all of them
    "__main__": 7,  # python -m shardstore: the CLI
}

#: The one upward import allowed, made inside a property on first use: ``Dataset.episodes`` is the
#: accessor of the episode view (``ds.episodes``, asked for by issue 11), which builds on Dataset.
UPWARD_ON_USE = {("dataset", "episodes")}


def test_import_shardstore_loads_no_optional_dependency() -> None:
    code = f"import shardstore, sys; print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _unit(module: str) -> str:
    """``shardstore.index.sqlite`` -> ``index``: the first component below the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported shardstore module) for every run-time import, nested ones included."""
    package = module if is_package else module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "shardstore")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "shardstore":
                if node.module is None or target == "shardstore":  # from . import nvmeta
                    found.extend((node.lineno, f"{target}.{a.name}") for a in node.names)
                else:
                    found.append((node.lineno, target))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_imports_flow_one_way(path: Path) -> None:
    module = _module_name(path)
    unit = _unit(module)
    assert unit in STAGES, f"{module} is in no stage of the import chain: add it to STAGES (DESIGN section 2)"
    imports = _imports(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py")
    wrong = [
        f"{path.name}:{line} imports {target} (stage {STAGES.get(_unit(target), '?')}) from stage {STAGES[unit]}"
        for line, target in imports
        if STAGES.get(_unit(target), 99) > STAGES[unit] and (unit, _unit(target)) not in UPWARD_ON_USE
    ]
    assert not wrong, "\n".join(wrong)


def test_nv_meta_schema_imports_nothing_of_shardstore() -> None:
    """shardstore imports nv_meta_schema (the index writer's SQL), so the reverse would be a cycle."""
    root = PACKAGE.parent / "nv_meta_schema"
    paths = sorted(root.rglob("*.py"))
    assert paths
    wrong = [
        f"{p.name}:{line} imports {target}"
        for p in paths
        for line, target in _imports(ast.parse(p.read_text(), str(p)), "nv_meta_schema", True)
    ]
    assert not wrong, "\n".join(wrong)


def test_nv_meta_schema_is_loaded_only_to_write_an_index() -> None:
    """Opening and reading load neither nv_meta_schema nor jsonschema; the index writer's SQL loads
    nv_meta_schema but still not jsonschema (only validation needs it)."""
    code = (
        "import sys, shardstore, shardstore.dataset, shardstore.index.sqlite as s\n"
        "before = [m in sys.modules for m in ('nv_meta_schema', 'jsonschema')]\n"
        "assert 'CREATE TABLE samples' in s.schema_sql()\n"
        "print(before, [m in sys.modules for m in ('nv_meta_schema', 'jsonschema')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[False, False] [True, False]"
