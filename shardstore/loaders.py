"""A dataset's own ``sample_loader`` and ``part_filter`` (``dataset.yaml``'s legacy form), run only on request.

Energon datasets may map parts to fields with code instead of a field map::

    sample_type: {__module__: megatron.energon, __class__: OCRSample}
    sample_loader: sample_loader.py:sample_loader
    part_filter: sample_loader.py:part_filter

The module sits in ``.nv-meta`` and comes with the data: running it runs whatever whoever wrote the
dataset (or could write to its bucket) put there. So shardstore runs it only when the reader says so,
``shardstore.open(url, trust_dataset_code=True)`` (``--trust-dataset-code``); otherwise a typed read of
such a dataset is a ``ConfigError`` that says this. Energon's rules: ``part_filter`` (a function of the
part name, or a list of part names) picks the parts to decode; ``sample_loader(raw)`` gets the decoded
parts with ``__key__`` and returns the sample type's fields. The module path must stay inside
``.nv-meta``; a remote module is downloaded once into the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import nvmeta
from .errors import ConfigError, PathEscapeError
from .storage import Storage, cache_root

__all__ = ["DatasetCode", "load_dataset_code", "refuse_dataset_code"]


@dataclass(frozen=True)
class DatasetCode:
    """The loaded ``sample_loader`` and the part filter (as a function of the part name)."""

    sample_loader: Callable[[dict[str, Any]], Mapping[str, Any]]
    part_filter: Callable[[str], bool]


def refuse_dataset_code(where: str) -> ConfigError:
    """The error for a typed read of a dataset whose ``dataset.yaml`` names code, without the opt-in."""
    return ConfigError(
        "dataset.yaml uses a sample_loader: Python code that comes with the dataset (.nv-meta/"
        f"{nvmeta.SAMPLE_LOADER_PY}), so running it runs whatever the dataset's author put there. It is off by "
        "default; if you trust this dataset pass trust_dataset_code=True (CLI: --trust-dataset-code) to run "
        "its sample_loader and part_filter as Energon does, or read it with field_map={...} or raw samples",
        path=where,
        member="sample_loader", noun="key",
    )


def _module_file(storage: Storage, module: str) -> str:
    """A local path of ``.nv-meta/<module>``, refusing a module outside ``.nv-meta``."""
    rel = posixpath.normpath(module.replace("\\", "/"))
    if rel.startswith(("../", "/")) or rel in ("..", ".") or not rel.endswith(".py"):
        raise PathEscapeError(f"sample_loader module {module!r} is not a .py file inside .nv-meta", path=storage.url(nvmeta.META_DIR))
    name = f"{nvmeta.META_DIR}/{rel}"
    local = storage.local_path(name)
    if local is not None:
        meta = os.path.realpath(storage.local_path(nvmeta.META_DIR) or "")
        if os.path.commonpath([os.path.realpath(local), meta]) != meta:
            raise PathEscapeError(f"sample_loader module {module!r} resolves outside .nv-meta", path=local)
        return local
    data = storage.read(name)
    folder = os.path.join(cache_root(), "dataset-code")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(data).hexdigest()[:32] + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def _function(storage: Storage, ref: str, default: str) -> Callable[..., Any]:
    module, _, fn = ref.rpartition(":") if ":" in ref else (ref, "", default)
    path = _module_file(storage, module)
    spec = importlib.util.spec_from_file_location(f"shardstore_dataset_code_{hashlib.sha1(path.encode()).hexdigest()[:12]}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {module}", path=path, member=ref)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    found = getattr(mod, fn or default, None)
    if not callable(found):
        raise ConfigError(f"{module} has no function {fn or default!r}", path=path, member=ref)
    return found  # type: ignore[no-any-return]


def load_dataset_code(storage: Storage, dataset_yaml: Mapping[str, Any]) -> DatasetCode:
    """Import the dataset's ``sample_loader`` and ``part_filter`` (the caller has the user's opt-in)."""
    loader = _function(storage, str(dataset_yaml["sample_loader"]), "sample_loader")
    filt = dataset_yaml.get("part_filter")
    if filt is None:
        raise ConfigError("dataset.yaml names a sample_loader but no part_filter (Energon needs both)",
                          path=storage.url(nvmeta.META_DIR), member="part_filter", noun="key")
    if isinstance(filt, list):
        names = {str(p) for p in filt}
        return DatasetCode(loader, names.__contains__)
    return DatasetCode(loader, _function(storage, str(filt), "part_filter"))
