"""Any format to any other in one call: ``convert(src, out, to="rlds")`` is ``import`` of ``src`` into
a temporary episode dataset beside ``out``, then ``export`` of it to ``out``, through the hub.

The source format is detected from the files when not given (``detect_format``). The temporary
dataset lies next to ``out`` (same filesystem, so the export's final rename stays atomic) in a
hidden folder that is removed afterwards, also on error or Ctrl-C; ``keep`` names a folder to import
into and keep instead. Where a pair needs the user's decision (pickled steps: ``allow_pickle``;
LeRobot without a frame rate: ``fps``), the error names the flag. The field mapping report
(``episodes.mapping.ConversionReport``) goes beside ``out`` as ``OUT.report.json`` and
``OUT.report.txt``, with the import's and the export's summaries.

This module is the one place that knows every format; the format packages still import none of
each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..episodes.mapping import ConversionReport
from ..episodes.staging import scratch_beside
from ..errors import ConfigError, ShardstoreError

__all__ = ["FORMATS", "ConversionResult", "convert", "detect_format"]

#: The formats ``convert`` reads and writes (``--from`` / ``--to``).
FORMATS = ("minari", "lerobot", "rlds", "episode-wds")
_TAR_SUFFIXES = (".tar", ".tar.zst")


@dataclass
class ConversionResult:
    """What ``convert`` did: the formats, the import's and the export's summaries, the field
    mapping, where the report files are, and the kept intermediate dataset (if ``keep``)."""

    src: str
    out: str
    source_format: str
    target_format: str
    imported: dict[str, Any]
    exported: dict[str, Any]
    mapping: ConversionReport
    seconds: float
    report_files: tuple[str, str] = ("", "")
    kept: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["mapping"] = self.mapping.to_dict()
        return out


def detect_format(src: str | os.PathLike[str]) -> str:
    """The format of the dataset at ``src`` from the files it holds: ``meta/info.json`` (LeRobot),
    ``dataset_info.json`` + ``features.json`` (RLDS), ``data/metadata.json`` or ``main_data.hdf5``
    (Minari, also a Minari dataset id), tar shards (the episode-frame layout). ``ConfigError``
    naming ``--from`` when none fits."""
    path = Path(src)
    if path.is_dir():
        if (path / "meta" / "info.json").is_file():
            return "lerobot"
        if (path / "dataset_info.json").is_file() and (path / "features.json").is_file():
            return "rlds"
        for data in (path / "data", path):
            if (data / "metadata.json").is_file() or (data / "main_data.hdf5").is_file():
                return "minari"
        if any(p.name.endswith(_TAR_SUFFIXES) for p in path.rglob("*") if p.is_file()):
            return "episode-wds"
    elif path.is_file():
        if path.name == "main_data.hdf5":
            return "minari"
        if path.name.endswith(_TAR_SUFFIXES):
            return "episode-wds"
    else:
        from .minari import locate

        try:
            locate(src)
            return "minari"
        except ShardstoreError:
            pass
    raise ConfigError(f"cannot tell which format this is; pass --from ({', '.join(FORMATS)})", path=os.fspath(src))


def _accepted(fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """The ``options`` that are set and that ``fn`` takes: a flag a format has no use for (``fps``
    for a Minari target) is not passed, and one it needs but lacks is the format's own error."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in options.items() if v is not None and (takes_any or k in params)}


def summary_of(report: Any) -> dict[str, Any]:
    """An import's or export's report as plain JSON values (their reports differ by format)."""
    if hasattr(report, "to_dict"):
        return dict(report.to_dict())
    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        return dataclasses.asdict(report)
    if isinstance(report, dict):
        return {k: v for k, v in report.items() if k != "report"}
    if isinstance(report, list):
        return {"files": report}
    return {"result": str(report)}


def _import(fmt: str, src: str, dataset: str, allow_pickle: bool, progress: bool,
            storage_options: dict[str, Any] | None) -> Any:
    writer: dict[str, Any] = {"progress": progress}
    if fmt == "minari":
        from .minari import import_minari

        return import_minari(src, dataset, **writer)
    if fmt == "lerobot":
        from .lerobot import import_lerobot

        return import_lerobot(src, dataset, storage_options=storage_options, **writer)
    if fmt == "rlds":
        from .rlds import import_rlds

        return import_rlds(src, dataset, storage_options=storage_options, **writer)
    from .episode_wds import find_tasks, import_episode_wds

    tasks = find_tasks(src)
    if len(tasks) > 1:
        raise ConfigError(f"holds {len(tasks)} tasks; convert one task folder at a time "
                          f"(e.g. {tasks[0].folder})", path=src)
    return import_episode_wds(src, dataset, allow_pickle=allow_pickle, **writer).datasets[0]


def _lerobot_options(options: dict[str, Any]) -> dict[str, Any]:
    """``export_lerobot``'s keywords: the choices a non-LeRobot source needs (``fps``, ``task``,
    ``images``, ``video_codec``, ``final_observation``) gathered into its ``WriteOptions``; as they
    are where the LeRobot package has no ``WriteOptions`` (a writer without those choices)."""
    from . import lerobot

    write_options = getattr(lerobot, "WriteOptions", None)
    if write_options is None:
        return options
    names = {f.name for f in dataclasses.fields(write_options)}
    chosen = {k: v for k, v in options.items() if k in names and v is not None}
    rest = {k: v for k, v in options.items() if k not in names}
    return {**rest, "options": write_options(**chosen)} if chosen else rest


def _exporter(fmt: str) -> Callable[..., Any]:
    if fmt == "minari":
        from .minari import export_minari

        return export_minari
    if fmt == "lerobot":
        from .lerobot import export_lerobot

        return export_lerobot
    if fmt == "rlds":
        from .rlds import export_rlds

        return export_rlds
    from .episode_wds import export_episode_wds

    return export_episode_wds


def export_to(dataset: str, out: str, *, to: str, allow_pickle: bool = False, force: bool = False,
              **target_options: Any) -> Any:
    """Export the episode dataset ``dataset`` into format ``to`` at ``out`` with that format's
    ``export``, given the ``target_options`` it takes (``version``, ``backend``, ``fps``...): the
    second half of ``convert``, and what ``edit --to`` runs on its result. Returns the export's report."""
    if to not in FORMATS:
        raise ConfigError(f"unknown target format {to!r}; one of {', '.join(FORMATS)}", member="--to")
    export = _exporter(to)
    if to == "lerobot":
        target_options = _lerobot_options(target_options)
    options = {"allow_pickle": allow_pickle, "force": force or None, **target_options}
    return export(dataset, out, **_accepted(export, options))


def convert(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    to: str,
    source_format: str | None = None,
    keep: str | os.PathLike[str] | None = None,
    allow_pickle: bool = False,
    force: bool = False,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    **target_options: Any,
) -> ConversionResult:
    """Convert the dataset ``src`` (format ``source_format``, else detected) into format ``to`` at
    ``out``; return the ``ConversionResult`` (also written beside ``out``).

    ``target_options`` go to the target's export where it takes them (``version`` for LeRobot,
    ``backend`` and ``minari_version`` for Minari, ``fps``, ``image_encoding``...). ``keep``: import
    into this folder and keep it (a prepared episode dataset), instead of a temporary one removed
    at the end. Raises ``ConfigError`` for an unknown format and what the import and export raise
    (``PickleNotAllowedError`` naming ``--allow-pickle``...); ``out`` is then left as it was.
    """
    t0 = time.perf_counter()
    src, out = os.fspath(src), os.fspath(out)
    if to not in FORMATS:
        raise ConfigError(f"unknown target format {to!r}; one of {', '.join(FORMATS)}", member="--to")
    fmt = source_format or detect_format(src)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown source format {fmt!r}; one of {', '.join(FORMATS)}", member="--from")
    with scratch_beside(out) if keep is None else contextlib.nullcontext("") as scratch:
        dataset = os.path.join(scratch, "dataset") if keep is None else os.fspath(keep)
        imported = _import(fmt, src, dataset, allow_pickle, progress, storage_options)
        mapping = ConversionReport(fmt, to)
        exported = export_to(dataset, out, to=to, allow_pickle=allow_pickle, force=force, mapping=mapping,
                             **target_options)
    if not (mapping.mapped or mapping.derived or mapping.dropped):
        mapping.note(f"{to}'s export has a report of its own: see 'exported'")
    summary = summary_of(imported)
    if keep is None and "path" in summary:
        summary["path"] = None  # the temporary dataset is gone
    report = ConversionResult(src, out, fmt, to, summary, summary_of(exported), mapping,
                           round(time.perf_counter() - t0, 3), kept=None if keep is None else os.fspath(keep))
    extra = {k: v for k, v in report.to_dict().items() if k != "mapping"}
    if isinstance(exported, dict) and isinstance(exported.get("report"), dict):
        extra = {**exported["report"], **extra}  # the mapping spec's own report, where `check rlds` reads it
    report.report_files = mapping.write(out, extra)
    return report
