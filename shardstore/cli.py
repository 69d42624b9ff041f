"""The ``shardstore`` command: thin click wrappers over the Python API.

Each command calls one public function, prints its result (``--json`` for scripts) and turns a
``ShardstoreError`` into a one-line message and exit code 1. This module touches neither
sqlite3 nor fsspec directly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from . import nvmeta
from .errors import ShardstoreError, from_library
from .humanize import human_bytes as _human_bytes
from .humanize import plural as _plural

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(fn: F) -> F:
    """Turn errors into ``shardstore: error: <place>: <message>``, one line on stderr, and exit
    code 1 (Ctrl-C: exit code 130 and ``shardstore: interrupted``). The library raises typed
    ``ShardstoreError``s; an exception of a library it drives (pyarrow, h5py, PyAV, json, sqlite3,
    the OS, RecursionError, MemoryError) that reaches here unconverted is described the same way
    (``errors.from_library``), never as a traceback. ``SHARDSTORE_TRACEBACK=1`` shows the
    traceback of those (to report a bug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ShardstoreError as e:
            echo_error(e, as_json=bool(kwargs.get("as_json")))
            sys.exit(1)
        except BrokenPipeError:  # `shardstore ls | head`
            sys.stderr.close()
            sys.exit(0)
        except KeyboardInterrupt:  # Ctrl-C: the shell's convention, 128 + SIGINT, and one line
            click.echo("shardstore: interrupted", err=True)
            sys.exit(130)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # usage errors: click prints them
        except Exception as e:
            if os.environ.get("SHARDSTORE_TRACEBACK") == "1":
                raise
            click.echo(f"shardstore: error: {from_library(e)}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def echo_error(e: ShardstoreError, as_json: bool) -> None:
    """One line on stderr, or with --json one object on stdout (what a script parses):
    ``{"error": {"type", "message", "detail", "path", "member", "offset"}}``."""
    if as_json:
        fields = {"type": type(e).__name__, "message": str(e), "detail": e.detail, "path": e.path,
                  "member": e.member, "offset": e.offset}
        click.echo(json.dumps({"error": fields}, default=str))
    else:
        click.echo(f"shardstore: error: {e}", err=True)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(fn)


def storage_options_option(fn: F) -> F:
    """``--storage-options '{"endpoint_url": ...}'``: passed to fsspec for remote URLs."""
    return click.option(
        "--storage-options",
        "storage_options",
        default=None,
        help='JSON object passed to fsspec/s3fs, e.g. \'{"endpoint_url": "http://127.0.0.1:9000"}\'.',
        callback=_parse_storage_options,
    )(fn)


def _parse_storage_options(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise click.BadParameter(f"not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object")
    return parsed


def allow_pickle_option(fn: F) -> F:
    """``--allow-pickle``: the user's decision to decode pickled steps (restricted unpickler)."""
    return click.option(
        "--allow-pickle", is_flag=True,
        help="Decode pickled steps (an episode-frame source) into arrays, through the restricted unpickler "
             "(numpy and builtins only).",
    )(fn)


def quiet_option(fn: F) -> F:
    """``-q/--quiet``: print nothing but errors (the exit code still tells the result)."""
    return click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")(fn)


def split_option(fn: F) -> F:
    """``--split S``: one split of split.yaml (train, val, test, ...); default: every shard."""
    return click.option("--split", default=None, help="Only this split of split.yaml (e.g. train); default: all shards.")(fn)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


class _Group(click.Group):
    """Lists each command with its whole first sentence (click cuts it with "..." to fit a line)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(None, "-V", "--version", package_name="shardstore")
def main() -> None:
    """Index WebDataset tar shards and read them at random, locally or on S3.

    \b
    Example:
      shardstore prepare ./my-dataset --split-ratio 8,1,1 --non-interactive
      shardstore info ./my-dataset
    """
    # numpy's OpenBLAS starts a thread per core when loaded (~0.03 CPU-s spinning up) for linear
    # algebra no command does; a user's own setting wins (runs before a command imports numpy)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _ask_dataset_yaml(part_names: list[str]) -> tuple[str, dict[str, str] | None] | None:
    """The wizard of ``energon prepare``: sample type, then a field map, showing the parts found."""
    click.echo(f"Found the following part types in the dataset: {', '.join(part_names)}")
    if not click.confirm("Do you want to create a dataset.yaml interactively?", default=True):
        return None
    names = list(nvmeta.SAMPLE_TYPES)
    click.echo("The following sample types are available:")
    for i, name in enumerate(names):
        click.echo(f"{i}. {name}")
    while True:
        choice = click.prompt("Please enter a number to choose a class", type=int)
        if 0 <= choice < len(names):
            break
        click.echo("Invalid choice. Please try again.")
    sample_type = names[choice]
    if sample_type == "CrudeWebdataset":
        return sample_type, None
    click.echo("For each field, enter the part name (alternatives: jpg,png; json fields: json[a][0]).")
    field_map: dict[str, str] = {}
    for field, required in nvmeta.SAMPLE_TYPES[sample_type]:
        while True:
            value = click.prompt(
                f"Part for '{field}'" + ("" if required else " (optional, empty to skip)"),
                default="" if not required else None,
                show_default=False,
            )
            if not value and not required:
                break
            unknown = [o.split("[", 1)[0] for o in value.split(",") if o.split("[", 1)[0] not in part_names]
            if not unknown:
                field_map[field] = value
                break
            click.echo(f"No part named {unknown[0]!r} in the dataset. Please try again.")
    return sample_type, field_map


@main.command()
@click.argument("path")
@click.option("--split-ratio", help="Train/val/test ratio, e.g. 8,1,1 or 0.8,0.1,0.1.")
@click.option("--split-parts", multiple=True, help="NAME:REGEX (repeatable); a split from shard paths matching REGEX.")
@click.option("--exclude", help="Skip shards whose relative path matches this regex (re.search).")
@click.option("--num-workers", type=click.IntRange(min=1), default=None, help="Worker processes for scanning, at least 1 (default: CPU count).")
@click.option("--shuffle-tars", is_flag=True, help="Shuffle the shards (seed 42, as Energon) before a ratio split.")
@click.option("--tar-index-only", is_flag=True, help="Only (re)write the .tar.idx files of the shards in .info.json.")
@click.option("--force-overwrite", is_flag=True, help="Prepare again even if .nv-meta exists.")
@click.option("--non-interactive", is_flag=True, help="Never ask; fail if something is missing.")
@click.option("--skip-dataset-yaml", is_flag=True, help="Do not write dataset.yaml.")
@click.option("--sample-type", help="Energon sample class for dataset.yaml (e.g. CaptioningSample) or CrudeWebdataset.")
@click.option("--field-map", help='JSON field map for dataset.yaml, e.g. \'{"image": "jpg", "caption": "txt"}\'.')
@click.option("--dataset-yaml-name", default=nvmeta.DATASET_YAML, show_default=True, help="File name in .nv-meta for the dataset.yaml written.")
@click.option("--tmp-path", type=click.Path(file_okay=False), default=None, help="For a remote PATH: local folder where index.sqlite is built before upload.")
@click.option("--media-metadata-by-glob", default=None, help="Record media metadata of members matching these globs, e.g. '*.jpg,*.mp4'.")
@click.option("--media-metadata-by-header", is_flag=True, help="Record media metadata of members whose first bytes are an image, audio or video.")
@click.option("--media-metadata-by-extension", is_flag=True, help="Record media metadata of members with an image, audio or video extension.")
@click.option("--fix-duplicates", is_flag=True, help="If a key repeats across shards, rename every member to SHARD/NAME first (as Energon).")
@click.option("--dry-run", is_flag=True, help="With --fix-duplicates: list what would be renamed, change nothing.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar (only on a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--executor", "executor_kind", type=click.Choice(["local", "dask"]), default=None,
              help="Who scans the shards: this machine's workers (default) or a Dask cluster (docs/scale.md).")
@click.option("--dask-scheduler", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://10.0.0.1:8786 (implies --executor dask).")
@click.option("--resume/--no-resume", default=True, help="Reuse the shard scans an interrupted prepare kept (default).")
@click.option("--update", is_flag=True, help="Index only new or changed shards of a prepared dataset; keep the rest.")
@click.option("--drop-missing", is_flag=True, help="With --update: drop shards that vanished (else an error).")
@storage_options_option
@json_option
@handle_errors
def prepare(
    path: str,
    split_ratio: str | None,
    split_parts: tuple[str, ...],
    exclude: str | None,
    num_workers: int | None,
    shuffle_tars: bool,
    tar_index_only: bool,
    force_overwrite: bool,
    non_interactive: bool,
    skip_dataset_yaml: bool,
    sample_type: str | None,
    field_map: str | None,
    dataset_yaml_name: str,
    tmp_path: str | None,
    media_metadata_by_glob: str | None,
    media_metadata_by_header: bool,
    media_metadata_by_extension: bool,
    fix_duplicates: bool,
    dry_run: bool,
    progress: bool,
    quiet: bool,
    executor_kind: str | None,
    dask_scheduler: str | None,
    resume: bool,
    update: bool,
    drop_missing: bool,
    storage_options: dict[str, Any] | None,
    as_json: bool,
) -> None:
    """Index the tar shards under PATH (a folder or s3:// URL) and write .nv-meta as Energon 7 does.

    Reads only the tar headers. Takes the flags of `energon prepare`.

    \b
    Example:
      shardstore prepare ./ds --split-ratio 8,1,1 --sample-type CaptioningSample \\
          --field-map '{"image": "jpg", "caption": "txt"}' --non-interactive
    """
    from .executors import executor_for
    from .prepare import prepare as run_prepare

    if dry_run:
        if not fix_duplicates:
            raise click.UsageError("--dry-run goes with --fix-duplicates")
        _print_duplicate_plan(path, exclude, storage_options, as_json)
        return
    interactive = not non_interactive and sys.stdin.isatty() and not as_json and not quiet
    if interactive and not tar_index_only and not update and not path.endswith(".jsonl"):
        if force_overwrite is False and _already_prepared(path, storage_options):
            if not click.confirm("It seems the dataset had already been prepared. Do you want to continue?"):
                return
            force_overwrite = True
        if split_ratio is None and not split_parts:
            split_ratio = click.prompt('Please enter a desired train/val/test split like "0.5, 0.2, 0.3" or "8,1,1"')
    with executor_for(executor_kind, dask_scheduler) as executor:
        report = run_prepare(
            path,
            split_ratio=split_ratio,
            split_parts=list(split_parts) or None,
            exclude=exclude,
            num_workers=num_workers,
            shuffle_tars=shuffle_tars,
            tar_index_only=tar_index_only,
            force_overwrite=force_overwrite,
            skip_dataset_yaml=skip_dataset_yaml,
            sample_type=sample_type,
            field_map=field_map,
            progress=progress and not quiet and sys.stderr.isatty(),
            storage_options=storage_options,
            choose_dataset_yaml=_ask_dataset_yaml if interactive else None,
            executor=executor,
            resume=resume,
            update=update,
            drop_missing=drop_missing,
            dataset_yaml_name=dataset_yaml_name,
            tmp_path=tmp_path,
            fix_duplicates=fix_duplicates,
            media_metadata_by_glob=media_metadata_by_glob,
            media_metadata_by_header=media_metadata_by_header,
            media_metadata_by_extension=media_metadata_by_extension,
            confirm_field_map=_confirm_field_map if interactive else None,
        )
    if as_json:
        click.echo(report.to_json())
    elif not quiet:
        click.echo(
            f"Prepared {report.path}: {_plural(report.shards, 'shard')}, {_plural(report.samples, 'sample')}, "
            f"{_plural(report.parts, 'part')} ({report.bytes / 1e6:.1f} MB) in {report.seconds:.2f} s"
        )
        for name, c in report.splits.items():
            click.echo(f"  {name}: {_plural(c['shards'], 'shard')}, {_plural(c['samples'], 'sample')}")
        click.echo(f"  parts: {', '.join(f'{k} ({v})' for k, v in report.part_names.items())}")
        if report.sample_type is None and not skip_dataset_yaml and not tar_index_only and not path.endswith(".jsonl"):
            click.echo("  no dataset.yaml written (use --sample-type to create it)")
        for problem in report.problems:
            click.echo(f"  warning: {problem}", err=True)
        if report.media is not None:
            counts = ", ".join(f"{k} ({v})" for k, v in report.media.items()) or "none found"
            click.echo(f"  media metadata: {counts}")
        if report.renamed_shards is not None:
            n = len(report.renamed_shards)
            click.echo(f"  --fix-duplicates: {'no duplicate keys, nothing renamed' if not n else f'renamed the members of {n} shards'}")


def _print_duplicate_plan(path: str, exclude: str | None, storage_options: dict[str, Any] | None, as_json: bool) -> None:
    """``prepare --fix-duplicates --dry-run``: what would be renamed (``duplicates.fix_duplicates_dry_run``)."""
    from .duplicates import fix_duplicates_dry_run

    plan = fix_duplicates_dry_run(path, exclude=exclude, storage_options=storage_options)
    if as_json:
        echo_json(plan.to_dict())
        return
    click.echo(f"{len(plan.duplicates)} keys occur in more than one shard")
    for key, shards in list(plan.duplicates.items())[:10]:
        click.echo(f"  {key}: {', '.join(shards)}")
    if plan.skipped:
        click.echo(f"{len(plan.skipped)} shards were renamed by an earlier run")
    if plan.problems:
        click.echo("renaming is impossible:")
        for problem in plan.problems[:10]:
            click.echo(f"  {problem}")
    elif plan.needed:
        click.echo(f"would rename every member of {len(plan.shards)} shards, e.g.:")
        for shard, (old, new) in list(plan.examples.items())[:10]:
            click.echo(f"  {shard}: {old} -> {new}")
    else:
        click.echo("nothing to rename")


def _confirm_field_map(problems: list[str]) -> bool:
    """Interactive prepare: the field map does not fit the parts found; write it anyway?"""
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)
    return click.confirm("Write dataset.yaml with this field map anyway?", default=False)


def _already_prepared(path: str, storage_options: dict[str, Any] | None) -> bool:
    return nvmeta.dataset_kind(path, storage_options) == nvmeta.DatasetKind.WEBDATASET


# ----- inspection: info, check, ls, cat (shardstore/inspection.py, checks.py) -------------------
def _format_label(energon_version: str) -> str:
    return "format version not recorded" if energon_version == "unknown" else f"Energon {energon_version} format"


def _is_metadataset(path: str) -> bool:
    """A metadataset YAML (Energon's MetadatasetV2 or v1): `info`/`check` go to shardstore.metadataset."""
    return nvmeta.dataset_kind(path) == nvmeta.DatasetKind.METADATASET


def _echo_metadataset_info(summary: dict[str, Any]) -> None:
    click.echo(f"{summary['path']} ({summary['class']})")
    for split, s in summary["splits"].items():
        if "error" in s:
            click.echo(f"  {split}: error: {s['error']}")
            continue
        per_epoch = f" ({s['epoch_samples']} per epoch)" if "epoch_samples" in s else ""
        click.echo(
            f"  {split}: {s['mode']}, {_plural(len(s['sources']), 'source')}, {_plural(s['samples'], 'sample')}{per_epoch}"
        )
        for src in s["sources"]:
            share = ""
            if src["weight"] is not None:
                share = f"weight {src['weight']:.4g}, "
            elif src["repetitions"] is not None:
                share = f"repetitions {src['repetitions']:g}, "
            size = f"error: {src['error']}" if "error" in src else _plural(src["samples"], "sample")
            if "subset" in src and src["subset"] != [0, src.get("dataset_samples")]:
                size += f" (subset {src['subset'][0]}:{src['subset'][1]} of {src['dataset_samples']})"
            if "epoch_samples" in src:
                size += f", {src['epoch_samples']} per epoch"
            click.echo(f"    {src['name']}  [{src['split_part']}] {share}{size}")
            if src["subflavors"]:
                click.echo(f"      subflavors: {json.dumps(src['subflavors'])}")
            for name, aux in src["aux"].items():
                state = "ok" if aux["resolves"] else f"MISSING: {aux.get('error', '')}"
                files = f", {aux['files']} files" if "files" in aux else ""
                click.echo(f"      aux {name}: {aux['kind']} {aux['path']}{files} -- {state}")


@main.command("info")
@click.argument("path")
@storage_options_option
@json_option
@handle_errors
def info_command(path: str, storage_options: dict[str, Any] | None, as_json: bool) -> None:
    """Summarize a prepared dataset (or a metadataset YAML): samples, shards, bytes, splits, parts.

    Works on every prepared dataset, crude or typed, with or without dataset.yaml, prepared by
    shardstore or by Energon, local or remote.

    \b
    Example:
      shardstore info ./ds
      shardstore info s3://bucket/ds --storage-options '{"endpoint_url": "http://127.0.0.1:9000"}' --json
    """
    if _is_metadataset(path):  # sources, weights, sizes per split, aux stores and whether they resolve
        from .metadataset import metadataset_info

        summary = metadataset_info(path, storage_options=storage_options)
        echo_json(summary) if as_json else _echo_metadataset_info(summary)
        return
    from .inspection import info

    s = info(path, storage_options=storage_options)
    layout = _episode_wds_summary(path, storage_options)
    if as_json:
        echo_json({**s.to_dict(), **layout})
        return
    if s.index_format == "jsonl":
        kind = "JSONL (crude: one JSON object per line, part json)"
    elif s.sample_type is None:
        kind = "none (no dataset.yaml: raw samples, as with CrudeWebdataset)"
    else:
        kind = s.sample_type + (" (crude)" if s.crude and s.sample_type != "CrudeWebdataset" else "")
    rows = [
        ("prepared by", f"{s.prepared_by} ({_format_label(s.energon_version)}, {s.index_format} index)"),
        ("samples", str(s.samples)),
        ("shards", str(s.shards)),
        ("size", f"{_human_bytes(s.bytes)} ({s.bytes} bytes)"),
        ("sample type", kind),
    ]
    if s.field_map:
        rows.append(("field map", ", ".join(f"{k} <- {v}" for k, v in s.field_map.items())))
    if s.sample_loader:
        rows.append(("loader", f"{s.sample_loader} (in .nv-meta)"))
    for i, (name, c) in enumerate(s.splits.items()):
        rows.append(("splits" if i == 0 else "", f"{name}: {_plural(c['shards'], 'shard')}, {_plural(c['samples'], 'sample')}"))
    if s.excluded["shards"] or s.excluded["samples"]:
        rows.append(("excluded", f"{_plural(s.excluded['shards'], 'shard')}, {_plural(s.excluded['samples'], 'sample')}"))
    parts = ", ".join(name if n is None else f"{name} ({n})" for name, n in s.parts.items())
    rows.append(("parts", parts or "none"))
    if s.media is not None:
        filters = "; ".join(f["strategy"] + (f" {f['patterns']}" if f["patterns"] else "") for f in s.media["filters"]) or "none recorded"
        counts = ", ".join(f"{k} ({v})" for k, v in s.media["counts"].items()) or "no rows"
        rows.append(("media", f"{counts}; filter: {filters}"))
    if s.uuid:
        rows.append(("index uuid", s.uuid))
    if s.episodes is not None:
        ep = s.episodes
        source = f"{ep['source_format']} {ep['source_version']}".strip() or "written by EpisodeWriter"
        per = "step" if ep["granularity"] == "step" else "episode"
        shape = f"layout {ep['layout']}, one sample per {per}"
        rows.append(("episodes", f"{ep['episodes']} ({_plural(ep['steps'], 'step')}, {shape}; source: {source})"))
    click.echo(s.url)
    for label, value in rows + _episode_wds_rows(layout):
        click.echo(f"  {label:<12} {value}")


class _DefaultGroup(_Group):
    """A group whose first argument, when it names no subcommand, goes to ``default``: ``check PATH``
    is ``check dataset PATH`` while ``check lerobot SRC`` is the LeRobot checklist. Each outside
    format adds its check as one subcommand (``_add_format_check``)."""

    default = "dataset"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [self.default, *args]
        return super().parse_args(ctx, args)


@main.group("check", cls=_DefaultGroup, subcommand_metavar="PATH | FORMAT SRC [OPTIONS]")
def check_group() -> None:
    """Check a prepared dataset (`check PATH`), or an outside format's source (`check FORMAT SRC`).

    `check PATH` is `check dataset PATH` (a folder literally named like a format: `check ./lerobot`).
    Exits with 1 and lists the problems if there are any.

    \b
    Example:
      shardstore check ./ds --deep
      shardstore check lerobot ./my_lerobot
      shardstore check rlds ./robo/1.0.0 --json
    """


@check_group.command("dataset")
@click.argument("path")
@click.option("--deep", is_flag=True, help="Also walk every shard's tar headers: each part's range must hold that member.")
@click.option(
    "--ref",
    "refs",
    multiple=True,
    help="Metadataset only (repeatable): PART[field] naming aux files in each primary sample, e.g. "
    "json[image]; STORE:json[image] checks one aux store.",
)
@click.option("--progress/--no-progress", default=True, help="With --deep, a progress bar of shards (only on a terminal).")
@storage_options_option
@quiet_option
@json_option
@handle_errors
def check_command(
    path: str,
    deep: bool,
    refs: tuple[str, ...],
    progress: bool,
    storage_options: dict[str, Any] | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Check a prepared dataset: schema, shards, .tar.idx files and index agree (the default of `check`).

    Checks the .nv-meta files against their schema; that every shard exists with the size it had
    at prepare; that each .tar.idx agrees with index.sqlite and .info.json. With --deep, also reads
    every tar header and checks each part's byte range holds that member. Exits with 1 and lists
    the problems if there are any. First repairs what a killed prepare, import or export of the
    local PATH (or SRC) left: an OUT moved aside is put back, dead staging folders are removed.

    \b
    Example:
      shardstore check ./ds
      shardstore check dataset ./ds --deep --json
      shardstore check meta.yaml --ref 'json[image]'
    """
    if _is_metadataset(path):  # every dataset and aux path; with --ref, every referenced aux file
        from .metadataset import metadataset_check

        mreport = metadataset_check(path, refs=refs, storage_options=storage_options)
        checked = f"{_plural(mreport.sources, 'source')}, {_plural(mreport.samples, 'sample')}"
        if refs:
            checked += f", {_plural(mreport.references, 'reference')}"
        _print_check(mreport, checked, as_json, quiet)
        return
    if refs:
        raise click.UsageError("--ref applies to a metadataset YAML")
    from .checks import check

    show = progress and deep and not quiet and not as_json and sys.stderr.isatty()
    report = check(path, deep=deep, storage_options=storage_options, progress=show)
    checked = f"{_plural(report.shards, 'shard')}, {_plural(report.samples, 'sample')}"
    if deep:
        checked += f", {_plural(report.parts, 'part')} (deep)"
    if report.episodes_layout and not as_json and not quiet:
        click.echo(f"episodes: {report.episodes_layout}")
    _print_check(report, checked, as_json, quiet)


def _print_check(report: Any, checked: str, as_json: bool, quiet: bool) -> None:
    """Print a check's report (``to_dict`` as JSON, or each problem and a verdict line saying what
    was ``checked``) and exit with 1 when it found problems: one output for datasets and YAMLs."""
    if as_json:
        echo_json(report.to_dict())
    elif not quiet:
        for action in getattr(report, "repaired", ()):
            click.echo(f"repaired: {action}")
        for problem in report.problems:
            click.echo(f"problem: {problem}")
        verdict = "OK" if report.ok else _plural(len(report.problems), "problem")
        click.echo(f"{report.url}: {verdict} ({checked} checked in {report.seconds:.2f} s)")
    if not report.ok:
        sys.exit(1)


@main.command("ls")
@click.argument("path")
@split_option
@click.option("-n", "--limit", type=click.IntRange(min=0), default=None, help="List at most this many samples.")
@click.option("--media", is_flag=True, help="List the media metadata rows instead: NAME<TAB>TYPE<TAB>JSON (also of a prepare-media folder).")
@storage_options_option
@json_option
@handle_errors
def ls_command(
    path: str, split: str | None, limit: int | None, media: bool, storage_options: dict[str, Any] | None, as_json: bool
) -> None:
    """List sample keys and their parts, one sample per line: KEY<TAB>PART,PART,...

    Streams from the index page by page, so it starts at once on any dataset size. Samples that
    split.yaml excludes are marked "(excluded)". --json prints a JSON array (streamed).

    \b
    Example:
      shardstore ls ./ds --split val --limit 5
      shardstore ls ./ds --json | jq '.[].key'
    """
    if media:
        _ls_media(path, limit, storage_options, as_json)
        return
    from .inspection import ls

    listing = ls(path, split=split, limit=limit, storage_options=storage_options)
    if as_json:
        lines = ("  " + json.dumps(item.to_dict()) for item in listing)
        first = next(lines, None)
        click.echo("[" if first is None else "[\n" + first, nl=False)
        _echo_chunked("," + "\n" + line for line in lines)
        click.echo("\n]")
        return
    _echo_chunked(
        f"{item.key}\t{','.join(item.parts)}" + ("\t(excluded)\n" if item.excluded else "\n") for item in listing
    )


def _ls_media(path: str, limit: int | None, storage_options: dict[str, Any] | None, as_json: bool) -> None:
    """``ls --media``: one line (or JSON object) per ``media_metadata`` row (``inspection.ls_media``)."""
    from .inspection import ls_media

    rows = ls_media(path, limit=limit, storage_options=storage_options)
    if as_json:
        echo_json([m.to_dict() for m in rows])
        return
    _echo_chunked(f"{m.entry_key}\t{m.metadata_type}\t{json.dumps(m.values, separators=(',', ':'))}\n" for m in rows)


def _echo_chunked(pieces: Iterator[str], lines: int = 1024) -> None:
    """Print a stream of (newline-terminated) pieces a chunk at a time: one echo per line is slow."""
    chunk: list[str] = []
    for piece in pieces:
        chunk.append(piece)
        if len(chunk) >= lines:
            click.echo("".join(chunk), nl=False)
            chunk.clear()
    if chunk:
        click.echo("".join(chunk), nl=False)


@main.command("cat")
@click.argument("path")
@click.argument("name")
@storage_options_option
@handle_errors
def cat_command(path: str, name: str, storage_options: dict[str, Any] | None) -> None:
    """Write one member, NAME = KEY.PART, to stdout (binary-safe).

    Only that member's bytes are read (a range read, also on S3).

    \b
    Example:
      shardstore cat ./ds s00000_000042.txt
      shardstore cat ./ds s00000_000042.jpg > image.jpg
    """
    from .inspection import cat

    sys.stdout.flush()
    cat(path, name, sys.stdout.buffer, storage_options=storage_options)


@main.command("preview")
@click.argument("path")
@split_option
@click.option("-n", "--num", "n", type=click.IntRange(min=0), default=5, show_default=True, help="How many samples.")
@click.option(
    "--trust-dataset-code", is_flag=True,
    help="Run dataset.yaml's sample_loader/part_filter (Python code shipped in .nv-meta) and show the typed samples.",
)
@storage_options_option
@json_option
@handle_errors
def preview_command(
    path: str, split: str | None, n: int, trust_dataset_code: bool, storage_options: dict[str, Any] | None, as_json: bool
) -> None:
    """Print the first N samples for people: text and json parts shown, images as size and shape.

    Never interactive; pickled parts are never unpickled. Excluded samples are skipped.

    \b
    Example:
      shardstore preview ./ds -n 3 --split val
    """
    from .inspection import preview

    items = preview(path, n=n, split=split, storage_options=storage_options, trust_dataset_code=trust_dataset_code)
    if as_json:
        echo_json([{"position": i.position, "key": i.key, "shard": i.shard, "parts": i.values} for i in items])
        return
    for item in items:
        click.echo(f"[{item.position}] {item.key}  ({item.shard})")
        width = max((len(p) for p in item.parts), default=0)
        for part, text in item.parts.items():
            click.echo(f"  {part:<{width}}  {text}")


class _ByteSize(click.ParamType):
    """A byte count: ``0``, ``1048576``, ``512K``, ``16M``, ``1G`` (K/M/G = KiB/MiB/GiB; ``MB``, ``MiB`` too)."""

    name = "size"
    _UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(" ", "")
        for suffix in ("ib", "b"):
            if text.endswith(suffix) and len(text) > len(suffix) and text[-len(suffix) - 1] in "kmgt":
                text = text[: -len(suffix)]
                break
        unit = text[-1:] if text[-1:] in "kmgt" else ""
        try:
            number = float(text[: len(text) - len(unit)])
        except ValueError:
            self.fail(f"{value!r} is not a size (e.g. 0, 16M, 512K, 1G)", param, ctx)
        if number < 0:
            self.fail(f"{value!r}: a size cannot be negative", param, ctx)
        return int(number * self._UNITS[unit])


@main.command("mount")
@click.argument("dataset")
@click.argument("mountpoint", type=click.Path(file_okay=False))
@click.option(
    "--layout",
    type=click.Choice(["flat", "samples"]),
    default="flat",
    show_default=True,
    help="flat: one KEY.PART file per member (keys with / become folders); samples: one folder per key.",
)
@click.option("--foreground", is_flag=True, help="Serve in this process until unmounted (Ctrl-C unmounts).")
@click.option(
    "--direct-io-min",
    type=_ByteSize(),
    default=None,
    help="Open local members of at least SIZE bytes direct_io (default 16M; 0 = never): large reads "
    "run near the speed of reading the shard, but shared mmap of those files fails (ENODEV).",
)
@click.option("--split", default=None, help="Show only this split's samples at the root (the views keep every shard).")
@click.option("--mkdir", is_flag=True, help="Create MOUNTPOINT if missing (its last component only); removed again by the unmount.")
@storage_options_option
@quiet_option
@handle_errors
def mount_command(
    dataset: str, mountpoint: str, layout: str, foreground: bool, direct_io_min: int | None, split: str | None,
    mkdir: bool, storage_options: dict[str, Any] | None, quiet: bool,
) -> None:
    """Mount DATASET (a prepared folder, s3:// URL or metadataset YAML) read-only at MOUNTPOINT.

    Returns once the mount answers (the FUSE process runs on in the background) unless
    --foreground. Besides the layout, .by-shard/<shard>/ and .by-split/<split>/ show the same
    members per shard and per split. MOUNTPOINT must be an existing folder, as for mount(8), unless
    --mkdir. Unmount with `shardstore umount MOUNTPOINT`.

    \b
    Example:
      shardstore mount ./ds /mnt/ds && ls /mnt/ds | head
      shardstore mount s3://bucket/ds /mnt/ds --layout samples
      shardstore umount /mnt/ds
    """
    from .mount import mount

    handle = mount(
        dataset, mountpoint, layout=layout, foreground=foreground, storage_options=storage_options,
        direct_io_min=direct_io_min, split=split, mkdir=mkdir,
    )
    if not foreground and not quiet:
        click.echo(
            f"Mounted {dataset} at {handle.mountpoint} ({layout} layout, pid {handle.pid}, log {handle.log_path}); "
            f"unmount with: shardstore umount {handle.mountpoint}"
        )


@main.command("umount")
@click.argument("mountpoint", type=click.Path(file_okay=False))
@quiet_option
@handle_errors
def umount_command(mountpoint: str, quiet: bool) -> None:
    """Unmount a `shardstore mount` (also one whose process died) and end its process.

    Runs `fusermount3 -u`, or `fusermount3 -u -z` (lazy) when files are still open.

    \b
    Example:
      shardstore umount /mnt/ds
    """
    from .mount import umount

    umount(mountpoint)
    if not quiet:
        click.echo(f"Unmounted {mountpoint}")


@main.command("prepare-media")
@click.argument("path")
@click.option("--media-metadata-by-glob", default=None, help="Files whose name matches these globs, e.g. '*.jpg,*.mp4'.")
@click.option("--media-metadata-by-header", is_flag=True, help="Files whose first bytes are an image, audio or video.")
@click.option("--media-metadata-by-extension", is_flag=True, help="Files with an image, audio or video extension.")
@click.option("--num-workers", type=click.IntRange(min=1), default=None, help="Parallel probes, at least 1 (default: CPU count; 16 for remote).")
@click.option("--tmp-path", type=click.Path(file_okay=False), default=None, help="For a remote PATH: local folder where index.sqlite is built before upload.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar (only on a terminal).")
@storage_options_option
@quiet_option
@json_option
@handle_errors
def prepare_media_command(
    path: str, media_metadata_by_glob: str | None, media_metadata_by_header: bool, media_metadata_by_extension: bool,
    num_workers: int | None, tmp_path: str | None, progress: bool, storage_options: dict[str, Any] | None,
    quiet: bool, as_json: bool,
) -> None:
    """Record media metadata (size, format; duration, frames, rates) of a folder's media files in
    PATH/.nv-meta/index.sqlite, as `energon prepare-media` does; on a prepared dataset, of its members.

    A metadataset's `filesystem://` aux then answers media_metadata(name) for the folder.

    \b
    Example:
      shardstore prepare-media ./media --media-metadata-by-extension
      shardstore ls ./media --media
    """
    from .media_prepare import prepare_media

    report = prepare_media(
        path, media_metadata_by_glob=media_metadata_by_glob, media_metadata_by_header=media_metadata_by_header,
        media_metadata_by_extension=media_metadata_by_extension, num_workers=num_workers,
        storage_options=storage_options, tmp_path=tmp_path, progress=progress and not quiet and sys.stderr.isatty(),
    )
    if as_json:
        echo_json(report.to_dict())
    elif not quiet:
        counts = ", ".join(f"{k} ({v})" for k, v in report.media.items()) or "none"
        what = "files" if report.kind == "folder" else "members"
        click.echo(f"{report.path} ({report.kind}): {report.scanned} {what} looked at, media metadata: {counts} in {report.seconds:.2f} s")
    for problem in report.problems:
        click.echo(f"warning: {problem}", err=True)


# ----- Energon's command names -------------------------------------------------------------------
main.add_command(check_command, name="lint")  # `energon lint PATH`: scripts written for Energon keep working
# ----- import / export of episode formats (issue 11) -------------------------------------------------
# `shardstore import FORMAT ...` and `shardstore export FORMAT ...`: each format adds one command to
# these groups, a thin shell over its module in shardstore/convert/. Imports take the writer's
# options (episode_writer_options) and print the writer's report (echo_episode_report).
@main.group("import")
def import_group() -> None:
    """Import episodes from an outside format into a new prepared dataset (one sample per step).

    \b
    Example:
      shardstore import minari D4RL/door/human-v2 ./door --split-ratio 8,1,1
    """


@main.group("export")
def export_group() -> None:
    """Export every episode of a dataset to an outside format.

    \b
    Example:
      shardstore export minari ./door ./door-minari
    """


def episode_writer_options(fn: F) -> F:
    """The options of every ``shardstore import FORMAT``: ``fn`` gets them as one ``writer`` argument,
    ``EpisodeWriter``'s keyword arguments (``as_json`` and ``quiet`` are passed on as well) and the
    ``--executor``/``--dask-scheduler`` choice, which ``run_import`` turns into the importer's executor."""

    @functools.wraps(fn)
    def command(*args: Any, granularity: str, shard_size: int, split_ratio: str | None, force: bool, progress: bool,
                executor_kind: str | None, dask_scheduler: str | None, as_json: bool, quiet: bool, **kwargs: Any) -> Any:
        writer = {
            "granularity": granularity, "shard_size": shard_size, "split_ratio": split_ratio, "force": force,
            "progress": progress and not quiet and not as_json and sys.stderr.isatty(),
            "executor": (executor_kind, dask_scheduler),
        }
        return fn(*args, writer=writer, as_json=as_json, quiet=quiet, **kwargs)

    options = [
        click.option("--granularity", type=click.Choice(["columns", "step", "episode"]), default="columns",
                     show_default=True,
                     help="columns: one sample per episode, small fields as the records of one steps.npy (layout 2); "
                          "step or episode: layout 1, a tar member per field and step (per step or per episode sample)."),
        click.option("--shard-size", type=_ByteSize(), default="256M", show_default=True,
                     help="Close a shard (at an episode boundary) past this size: 512M, 1G, bytes."),
        click.option("--split-ratio", default=None, help="Train/val/test ratio by episodes, e.g. 8,1,1 (default: all train)."),
        click.option("--force", is_flag=True, help="Replace a dataset already at OUT."),
        click.option("--progress/--no-progress", default=True, help="Show a progress bar by steps (only on a terminal)."),
        click.option("--executor", "executor_kind", type=click.Choice(["local", "dask"]), default=None,
                     help="Who reads and encodes the episodes: this process (default) or a Dask cluster (docs/robotics.md)."),
        click.option("--dask-scheduler", metavar="ADDRESS",
                     help="Dask scheduler, e.g. tcp://10.0.0.1:8786 (implies --executor dask)."),
        json_option,
        quiet_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command  # type: ignore[return-value]


def run_import(importer: Callable[..., Any], src: str, out: str, writer: dict[str, Any], **options: Any) -> tuple[Any, float]:
    """An importer's own report and its wall time, run on the executor ``writer["executor"]``
    names; a SIGTERM unwinds it as Ctrl-C does (its staging is removed)."""
    from .executors import executor_for
    from .prepare import _sigterm_unwinds

    writer = dict(writer)
    kind, address = writer.pop("executor", (None, None))
    t0 = time.perf_counter()
    with executor_for(kind, address) as executor:
        raw = _sigterm_unwinds(importer)(src, out, **options, **writer, executor=executor)
    return raw, time.perf_counter() - t0


def run_export(exporter: Callable[..., Any], dataset: str, out: str, **options: Any) -> tuple[Any, float]:
    """An exporter's own report and its wall time; a SIGTERM unwinds it as Ctrl-C does."""
    from .prepare import _sigterm_unwinds

    t0 = time.perf_counter()
    raw = _sigterm_unwinds(exporter)(dataset, out, **options)
    return raw, time.perf_counter() - t0


def echo_convert_report(report: Any, as_json: bool, quiet: bool) -> None:
    """Every import's and export's output: ``ConvertReport.to_dict()`` with --json, else its one line."""
    if as_json:
        echo_json(report.to_dict())
    elif not quiet:
        click.echo(report.summary())


def _imported_version(out: str) -> str | None:
    """The source format's version an import recorded in its schema (None when it has none)."""
    from .episodes import episodes

    return episodes(out).schema.source_version or None


def _episode_counts(dataset: str, split: str | None, storage_options: dict[str, Any] | None) -> dict[str, int]:
    """``episodes`` and ``steps`` of a dataset's split (every episode without one), from its episode index."""
    from .episodes import episodes

    view = episodes(dataset, split, storage_options=storage_options)
    return {"episodes": len(view), "steps": int(view.lengths.sum())}


@import_group.command("minari")
@click.argument("src")
@click.argument("out", type=click.Path(file_okay=False))
@episode_writer_options
@handle_errors
def import_minari_command(src: str, out: str, writer: dict[str, Any], as_json: bool, quiet: bool) -> None:
    """Import a Minari dataset (0.3/0.4/0.5; HDF5, Arrow or Parquet) into a prepared dataset.

    SRC is a dataset folder, its data folder, or a dataset id under MINARI_DATASETS_PATH
    (default ~/.minari/datasets), namespaces included. Keys are e{episode:08d}_s{step:06d}.

    \b
    Example:
      shardstore import minari D4RL/door/human-v2 ./door
      shardstore import minari ~/.minari/datasets/cartpole-v0 ./cartpole --granularity episode --json
    """
    from .convert.minari import import_minari
    from .episodes.report import ConvertReport

    raw, seconds = run_import(import_minari, src, out, writer)
    report = ConvertReport.of(raw, action="import", fmt="minari", source=src, seconds=seconds, version=_imported_version(out))
    echo_convert_report(report, as_json, quiet)


@export_group.command("minari")
@click.argument("dataset")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--minari-version", type=click.Choice(["0.3", "0.4", "0.5"]), default=None,
              help="Layout to write (default: the source's, else 0.5).")
@click.option("--backend", type=click.Choice(["hdf5", "arrow", "parquet"]), default=None,
              help="0.5's data_format (default: the source's, else hdf5).")
@click.option("--force", is_flag=True, help="Replace a Minari dataset already at OUT.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar by steps (only on a terminal).")
@allow_pickle_option
@storage_options_option
@json_option
@quiet_option
@handle_errors
def export_minari_command(dataset: str, out: str, minari_version: str | None, backend: str | None, force: bool,
                          progress: bool, allow_pickle: bool, storage_options: dict[str, Any] | None, as_json: bool,
                          quiet: bool) -> None:
    """Export every episode of DATASET as a Minari dataset folder OUT (OUT/data/...).

    Put OUT under MINARI_DATASETS_PATH as OUT's dataset id to load it with minari.load_dataset.

    \b
    Example:
      shardstore export minari ./door ~/.minari/datasets/door-copy-v0
      shardstore export minari ./door ./door-arrow --backend arrow
    """
    from .convert.minari import export_minari
    from .episodes.report import ConvertReport

    raw, seconds = run_export(
        export_minari, dataset, out, storage_options=storage_options, version=minari_version, backend=backend,
        force=force, progress=progress and not quiet and not as_json and sys.stderr.isatty(), allow_pickle=allow_pickle,
    )
    echo_convert_report(ConvertReport.of(raw, action="export", fmt="minari", source=dataset, seconds=seconds), as_json, quiet)


# ----- the episode-frame WebDataset layout (issue 14) ----------------------------------------------
def _episode_wds_summary(path: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """``info``'s extra lines for an episode-frame import ({} for other datasets and metadatasets)."""
    from .convert.episode_wds import source_summary

    return source_summary(path, storage_options)


def _episode_wds_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    if not summary:
        return []
    s = summary["episode_wds"]
    rows = [("subflavors", ", ".join(f"{k}={v}" for k, v in s["subflavors"].items()) or "none")]
    for i, (shard, names) in enumerate(s["metadata_classes"].items()):
        label = "pickled" if i == 0 else ""
        rows.append((label, f"{shard}: _metadata.meta.pickle names {', '.join(names) or 'no foreign class'} (not loaded)"))
    return rows


@import_group.command("episode-wds")
@click.argument("src")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--blend-yaml", is_flag=True, help="For a root of several tasks: also write OUT/blend.yaml blending them uniformly.")
@click.option("--allow-pickle", is_flag=True,
              help="Unpickle every part on the way (numpy and builtins only): checks them and records dtypes and shapes.")
@episode_writer_options
@handle_errors
def import_episode_wds_command(
    src: str, out: str, blend_yaml: bool, allow_pickle: bool, writer: dict[str, Any], as_json: bool, quiet: bool
) -> None:
    """Import the episode-frame WebDataset layout of imitation-learning research (frame_NNN.<part>.pickle
    steps after a _metadata.meta.pickle member; .tar or .tar.zst): one prepared episode dataset per task.

    SRC is a shard, a folder of shards, or a root of <demos|random>/<benchmark>/<task>/ folders (then
    OUT/<demos|random>/<benchmark>/<task>/ each). Parts keep their pickle bytes; pickles are never
    loaded unless --allow-pickle (`dones`, a bool, is read with every global inert: nothing called).

    \b
    Example:
      shardstore import episode-wds ./il-data ./il-ds --blend-yaml
    """
    from .convert.episode_wds import import_episode_wds
    from .episodes.report import ConvertReport

    raw, seconds = run_import(import_episode_wds, src, out, writer, blend_yaml=blend_yaml, allow_pickle=allow_pickle)
    totals = {k: sum(getattr(r, k) for r in raw.datasets) for k in ("episodes", "steps", "bytes")}
    report = ConvertReport.of(raw, action="import", fmt="episode-wds", source=src, seconds=seconds, path=out, **totals)
    echo_convert_report(report, as_json, quiet)
    if raw.blend_yaml and not quiet and not as_json:
        click.echo(f"Wrote {raw.blend_yaml}: blends {_plural(len(raw.datasets), 'task')} uniformly")


@export_group.command("episode-wds")
@click.argument("dataset")
@click.argument("out", type=click.Path())
@click.option("--compress/--no-compress", default=None,
              help="Write .tar.zst (or .tar) shards; default: as the source was (new shards: .tar).")
@click.option("--force", is_flag=True, help="Replace the shards of an earlier export at OUT.")
@storage_options_option
@quiet_option
@json_option
@handle_errors
def export_episode_wds_command(
    dataset: str, out: str, compress: bool | None, force: bool, storage_options: dict[str, Any] | None,
    quiet: bool, as_json: bool,
) -> None:
    """Export an episode dataset as the episode-frame WebDataset layout into the folder OUT.

    An import comes back member for member (metadata first, the same names and bytes, zstd where the
    source was); other episode datasets become new frame_NNN shards of pickled arrays.

    \b
    Example:
      shardstore export episode-wds ./il-ds/demos/magical/MoveToCorner ./il-back
    """
    from .convert.episode_wds import export_episode_wds
    from .episodes.report import ConvertReport, folder_bytes

    names, seconds = run_export(export_episode_wds, dataset, out, compress=compress, force=force, storage_options=storage_options)
    report = ConvertReport.of(
        {"shards": names}, action="export", fmt="episode-wds", source=dataset, seconds=seconds, path=out,
        bytes=folder_bytes(out), **_episode_counts(dataset, None, storage_options),
    )
    echo_convert_report(report, as_json, quiet)


# ----- LeRobot: import, export, check (issue 12) ----------------------------------------------------
@import_group.command("lerobot")
@click.argument("src")
@click.argument("out", required=False)
@click.option(
    "--frames",
    type=click.Choice(["jpg", "png", "npy"]),
    default=None,
    help="Decode every video frame into the step samples (jpg, png or npy) instead of keeping the mp4s whole.",
)
@click.option("--check-only", is_flag=True, help="Only run the LeRobot checklist on SRC (as `shardstore check lerobot SRC`).")
@storage_options_option
@episode_writer_options
@handle_errors
def import_lerobot_command(
    src: str,
    out: str | None,
    frames: str | None,
    check_only: bool,
    storage_options: dict[str, Any] | None,
    writer: dict[str, Any],
    as_json: bool,
    quiet: bool,
) -> None:
    """Import a LeRobot dataset (v2.1 or v3.0, a folder or fsspec URL) into OUT.

    One sample per frame; vector columns as .npy, image columns as their PNG bytes; the mp4s kept
    whole in OUT/.videos (frames decoded at random from them), or decoded into the samples with
    --frames. SRC is checked first; a dataset with errors is refused and nothing is written.

    \b
    Example:
      shardstore import lerobot ./my_lerobot ./ds
      shardstore import lerobot ./my_lerobot ./ds_jpg --frames jpg
      shardstore import lerobot ./my_lerobot --check-only
    """
    if check_only:
        _lerobot_check(src, storage_options, quiet, as_json)
        return
    if out is None:
        raise click.UsageError("OUT is required (or pass --check-only)")
    from .convert.lerobot import import_lerobot
    from .episodes.report import ConvertReport

    raw, seconds = run_import(import_lerobot, src, out, writer, frames=frames, storage_options=storage_options)
    echo_convert_report(ConvertReport.of(raw, action="import", fmt="lerobot", source=src, seconds=seconds), as_json, quiet)


@export_group.command("lerobot")
@click.argument("dataset")
@click.argument("out")
@click.option(
    "--version",
    "version",
    type=click.Choice(["2.1", "3.0", "v2.1", "v3.0"]),
    default=None,
    help="LeRobot version to write (default: the version a LeRobot import came from, else 3.0).",
)
@click.option("--fps", type=float, default=None, help="Frame rate, for a dataset whose source states none.")
@click.option("--task", default=None, help="The task of episodes that name none (LeRobot gives every frame one).")
@click.option(
    "--images",
    type=click.Choice(["video", "image"]),
    default="video",
    show_default=True,
    help="Image fields of another format as LeRobot video features (encoded) or image features (PNG).",
)
@click.option(
    "--video-codec",
    type=click.Choice(["av1", "h264", "hevc"]),
    default="av1",
    show_default=True,
    help="Codec of image fields encoded as video (av1: what LeRobot's recorder writes).",
)
@click.option(
    "--final-observation",
    type=click.Choice(["keep", "drop"]),
    default=None,
    help="The observation after the last action (Minari's final row, the episode-frame layout's next_obs): one more "
    "frame (restored on import) or dropped.",
)
@click.option("--force", is_flag=True, help="Replace a LeRobot dataset already at OUT.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar by episodes (only on a terminal).")
@allow_pickle_option
@storage_options_option
@quiet_option
@json_option
@handle_errors
def export_lerobot_command(
    dataset: str,
    out: str,
    version: str | None,
    fps: float | None,
    task: str | None,
    images: str,
    video_codec: str,
    final_observation: str | None,
    force: bool,
    progress: bool,
    allow_pickle: bool,
    storage_options: dict[str, Any] | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Export an episode dataset to a LeRobot dataset at OUT (v2.1 or v3.0).

    Parquet files with the source's schema, the source's metadata files (rewritten only where the
    version or the episodes changed), the mp4s copied, cut or joined at keyframes (re-encoded with
    the source codec only where the GOP does not allow it; the report lists those files). A dataset
    from another format gets LeRobot's default columns, its tasks from its language fields or
    --task, its fps or --fps, and its image fields as video (--images, --video-codec).

    \b
    Example:
      shardstore export lerobot ./ds ./my_lerobot_v30 --version 3.0
      shardstore export lerobot ./minari_ds ./my_lerobot --fps 30 --task "reach" --final-observation drop
      shardstore export lerobot ./il_ds ./il_lerobot --fps 10 --final-observation keep --allow-pickle
    """
    from .convert.lerobot import WriteOptions, export_lerobot
    from .episodes.report import ConvertReport, folder_bytes

    with _episode_bar(progress and not quiet and not as_json and sys.stderr.isatty(), dataset, storage_options) as bar:
        raw, seconds = run_export(
            export_lerobot, dataset, out, version=version, force=force, storage_options=storage_options, progress=bar,
            options=WriteOptions(fps, task, images, video_codec, final_observation), allow_pickle=allow_pickle,
        )
    warnings = [f"re-encoded {path} (frames decoded or from images, or episodes off keyframes)" for path in raw.reencoded]
    report = ConvertReport.of(
        raw, action="export", fmt="lerobot", source=dataset, seconds=seconds, bytes=folder_bytes(raw.out), warnings=warnings,
    )
    echo_convert_report(report, as_json, quiet)


@contextlib.contextmanager
def _episode_bar(show: bool, dataset: str, storage_options: dict[str, Any] | None) -> Iterator[Callable[[int], None] | None]:
    """A progress bar by episodes on stderr for an exporter's ``progress(n)`` callback (None when hidden)."""
    if not show:
        yield None
        return
    from tqdm import tqdm

    total = _episode_counts(dataset, None, storage_options)["episodes"]
    with tqdm(total=total, unit="episode", desc="Exporting", file=sys.stderr) as bar:
        yield lambda n: bar.update(n - bar.n)


def format_check_options(fn: F) -> F:
    """The options of every ``shardstore check FORMAT SRC``: ``--deep``, ``--progress``,
    ``--storage-options``, ``--quiet``, ``--json``; and first, what a killed export to a local SRC
    left repaired (``checks.repair_output``: one ``repaired: ...`` line each on stderr)."""

    @functools.wraps(fn)
    def repaired_first(**kwargs: Any) -> Any:
        from .checks import repair_output

        for action in repair_output(kwargs["src"]):
            if not kwargs.get("quiet"):
                click.echo(f"repaired: {action}", err=True)
        return fn(**kwargs)

    command: Any = repaired_first
    options = [
        click.option("--deep", is_flag=True, help="Also read every row, statistic and video packet (see docs/robotics.md)."),
        click.option("--progress/--no-progress", default=True, help="With --deep, a progress bar on stderr (only on a terminal)."),
        storage_options_option,
        quiet_option,
        json_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _lerobot_check(src: str, storage_options: dict[str, Any] | None, quiet: bool, as_json: bool) -> None:
    """Print the LeRobot checklist's report; exit 1 when it has errors."""
    from .convert.lerobot import check

    _echo_format_report(check(src, storage_options=storage_options), quiet, as_json)


def _echo_format_report(report: Any, quiet: bool, as_json: bool) -> None:
    """A format check's report (``episodes.problems.FormatReport``) as lines or JSON; exit 1 on an error."""
    if as_json:
        click.echo(report.to_json())
    elif not quiet:
        for line in report.lines():
            click.echo(line)
    if not report.ok:
        sys.exit(1)


# ----- RLDS: import, export, check ------------------------------------------------------------------
@import_group.command("rlds")
@click.argument("src")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--split", default=None, help="Only this split of dataset_info.json (e.g. train); default: all splits.")
@storage_options_option
@episode_writer_options
@handle_errors
def import_rlds_command(
    src: str,
    out: str,
    split: str | None,
    storage_options: dict[str, Any] | None,
    writer: dict[str, Any],
    as_json: bool,
    quiet: bool,
) -> None:
    """Import an RLDS dataset (a TFDS version folder of TFRecord shards, local or fsspec URL) into OUT.

    One sample per step: images as their encoded bytes, tensors as .npy with features.json's dtype
    and shape, text as .txt; every record's CRCs and RLDS's is_first/is_last/is_terminal rules are
    checked. features.json and dataset_info.json are kept under .nv-meta/source/, each episode's
    split, shard and record in the episode index. The splits of SRC are kept (--split-ratio only
    applies to episodes without one). No TensorFlow needed.

    \b
    Example:
      shardstore import rlds ./robo/1.0.0 ./ds
      shardstore import rlds s3://bucket/robo/1.0.0 ./ds_train --split train
    """
    from .convert.rlds import import_rlds
    from .episodes.report import ConvertReport

    raw, seconds = run_import(import_rlds, src, out, writer, split=split, storage_options=storage_options)
    report = ConvertReport.of(raw, action="import", fmt="rlds", source=src, seconds=seconds, version=_imported_version(out))
    echo_convert_report(report, as_json, quiet)


@export_group.command("rlds")
@click.argument("dataset")
@click.argument("out")
@click.option("--split", default=None, help="Only this split's episodes; default: all.")
@click.option(
    "--main-camera",
    default=None,
    help="LeRobot sources: the camera key that becomes observation/image (default: observation.images.top, "
    "else observation.image, else the first camera).",
)
@click.option(
    "--image-encoding",
    type=click.Choice(["png", "jpeg"]),
    default="png",
    help="LeRobot sources: how converted frames are encoded (png: lossless).",
)
@click.option("--name", default=None, help="Dataset name in the shard file names (default: the source's).")
@click.option("--force", is_flag=True, help="Replace an RLDS folder already at OUT.")
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr (only on a terminal).")
@allow_pickle_option
@storage_options_option
@quiet_option
@json_option
@handle_errors
def export_rlds_command(
    dataset: str,
    out: str,
    split: str | None,
    main_camera: str | None,
    image_encoding: str,
    name: str | None,
    force: bool,
    progress: bool,
    allow_pickle: bool,
    storage_options: dict[str, Any] | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Export an episode dataset as RLDS: OUT becomes the TFDS version folder (dataset_info.json,
    features.json and TFRecord shards in it) that tfds.builder_from_directory(OUT) reads.

    A dataset imported from RLDS gets back its features.json, split names and shard count, with
    byte-identical records. One imported from LeRobot is converted as the LeRobot -> RLDS mapping
    spec says, and its validation report is written beside OUT (OUT.report.json, OUT.report.txt).

    \b
    Example:
      shardstore export rlds ./ds ./export/robo/1.0.0
      shardstore export rlds ./lerobot_ds ./rlds/1.0.0 --main-camera observation.images.wrist
    """
    from .convert.rlds import export_rlds
    from .episodes.report import ConvertReport, folder_bytes

    show = progress and not quiet and not as_json and sys.stderr.isatty()
    info, seconds = run_export(
        export_rlds, dataset, out, split=split, main_camera=main_camera, image_encoding=image_encoding, name=name,
        force=force, progress=show, storage_options=storage_options, allow_pickle=allow_pickle,
    )
    splits = [
        {"name": s["name"], "episodes": sum(int(n) for n in s["shardLengths"]), "shards": len(s["shardLengths"])}
        for s in info["splits"]
    ]
    extras: dict[str, Any] = {"name": info.get("name"), "splits": splits}
    mapping = info.get("report")
    if mapping is not None:  # a LeRobot source: the mapping's validation report, written beside OUT
        extras.update(mapping=mapping["totals"], valid=mapping["validation"]["ok"], report=f"{out.rstrip('/')}.report.json")
    report = ConvertReport.of(
        extras, action="export", fmt="rlds", source=dataset, seconds=seconds, path=out, version=info.get("version"),
        bytes=folder_bytes(out), warnings=[str(w) for w in (mapping or {}).get("warnings", [])],
        **(
            {"episodes": mapping["totals"]["episodes_out"], "steps": mapping["totals"]["steps_out"]}
            if mapping is not None
            else _episode_counts(dataset, split, storage_options)
        ),
    )
    echo_convert_report(report, as_json, quiet)
    if mapping is not None and not quiet and not as_json:
        t, verdict = mapping["totals"], "valid" if mapping["validation"]["ok"] else "INVALID"
        click.echo(
            f"LeRobot -> RLDS: {t['episodes_out']} of {t['episodes_in']} episodes ({t['episodes_failed']} failed), "
            f"{len(mapping['warnings'])} warnings, output {verdict}; report: {out.rstrip('/')}.report.txt"
        )


#: `shardstore check FORMAT SRC --deep`: format -> (module, function(src, *, deep, storage_options,
#: progress) -> FormatReport); minari and episode-wds have no other check, so run it without --deep too.
DEEP_CHECKS = {
    "lerobot": ("shardstore.convert.lerobot.deep", "check_deep"),
    "minari": ("shardstore.convert.minari.check", "check_minari"),
    "rlds": ("shardstore.convert.rlds.deep", "check_deep"),
    "episode-wds": ("shardstore.convert.episode_wds.check", "check_episode_wds"),
}


def _format_check(
    fmt: str, src: str, deep: bool, storage_options: dict[str, Any] | None, quiet: bool, as_json: bool, progress: bool
) -> None:
    """Print a format's (deep) check report: a verdict line and one line per problem, or JSON;
    exit 1 when it has errors."""
    import importlib

    module, name = DEEP_CHECKS[fmt]
    check = getattr(importlib.import_module(module), name)
    show = progress and not quiet and not as_json and sys.stderr.isatty()
    kwargs: dict[str, Any] = {"storage_options": storage_options, "progress": show}
    if fmt in ("minari", "episode-wds"):
        kwargs["deep"] = deep
    _echo_format_report(check(src, **kwargs), quiet, as_json)


def _rlds_check(src: str, storage_options: dict[str, Any] | None, quiet: bool, as_json: bool) -> None:
    """Print the RLDS rules' report (each rule, then each problem); exit 1 when a rule fails."""
    from .convert.rlds.check import check_rlds

    report = check_rlds(src, storage_options=storage_options)
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        click.echo(report.text())
    if not report.ok:
        sys.exit(1)


_ShallowCheck = Callable[[str, dict[str, Any] | None, bool, bool], None]


def _add_format_check(fmt: str, doc: str, shallow: _ShallowCheck | None = None) -> None:
    """Add ``shardstore check FMT SRC`` with ``doc`` as its --help: the format's ``DEEP_CHECKS``
    function with --deep, and without it too unless the format has a ``shallow`` check
    (``shallow(src, storage_options, quiet, as_json)``). One wrapper, so every format's check has
    the same options, repairs and exit codes."""

    def command(
        src: str, deep: bool, progress: bool, storage_options: dict[str, Any] | None, quiet: bool, as_json: bool
    ) -> None:
        if deep or shallow is None:
            _format_check(fmt, src, deep, storage_options, quiet, as_json, progress)
        else:
            shallow(src, storage_options, quiet, as_json)

    command.__name__ = f"check_{fmt.replace('-', '_')}_command"
    command.__doc__ = doc
    check_group.command(fmt)(click.argument("src")(format_check_options(handle_errors(command))))


_add_format_check(
    "lerobot",
    """Check a LeRobot dataset (v2.1 or v3.0, a folder or fsspec URL) against the LeRobot checklist.

    Version, chunks_size, path templates and the files they name, video keys, episodes, tasks,
    parquet columns and rows against video frames, fps and codec; with --deep every row, statistic
    and video packet too. Prints one line per finding and exits with 1 if there is an error;
    `import lerobot` runs the same checks first.

    \b
    Example:
      shardstore check lerobot ./my_lerobot
      shardstore check lerobot ./my_lerobot --deep --json
    """,
    _lerobot_check,
)
_add_format_check(
    "rlds",
    """Check an RLDS folder (a TFDS version folder, local or fsspec URL) against the RLDS rules.

    Runs the validation rules of the LeRobot -> RLDS mapping spec on any RLDS folder and prints
    the report: each rule pass, fail or skipped, then every problem with its file, record and
    field; --deep reads every record instead (docs/robotics.md). Exits with 1 when a rule fails.

    \b
    Example:
      shardstore check rlds ./robo/1.0.0
      shardstore check rlds ./robo/1.0.0 --deep --json
    """,
    _rlds_check,
)
_add_format_check(
    "minari",
    """Check a Minari dataset (a folder, its data folder or a dataset id) as Minari's loader reads it.

    Loader metadata, totals, steps+1 rows, one terminal step at the end, spaces; with --deep every
    value too (NaN, out of its space). Exits with 1 if there is an error.

    \b
    Example:
      shardstore check minari ./door-human-v2
      shardstore check minari D4RL/door/human-v2 --deep --json
    """,
)
_add_format_check(
    "episode-wds",
    """Check shards of the episode-frame WebDataset layout (a shard, a folder, or a root of tasks).

    Members, frame numbering and episode ends per shard; with --deep every pickled part through the
    restricted unpickler too. Exits with 1 if there is an error.

    \b
    Example:
      shardstore check episode-wds ./il-data
      shardstore check episode-wds ./il-data --deep --json
    """,
)


# ----- any format to any other (issue 21) -----------------------------------------------------------
@main.command("convert")
@click.argument("src")
@click.argument("out")
@click.option("--to", "to", type=click.Choice(["minari", "lerobot", "rlds", "episode-wds"]), required=True,
              help="The format to write at OUT.")
@click.option("--from", "source_format", type=click.Choice(["minari", "lerobot", "rlds", "episode-wds"]), default=None,
              help="SRC's format (default: detected from its files).")
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Import into this folder and keep it (a prepared episode dataset); default: a temporary folder beside OUT, removed.")
@click.option("--version", "version", type=click.Choice(["2.1", "3.0", "v2.1", "v3.0"]), default=None,
              help="--to lerobot: the LeRobot version to write (default: the source's, else 3.0).")
@click.option("--fps", type=float, default=None, help="--to lerobot: frames per second, for a source that has none.")
@click.option("--final-observation", type=click.Choice(["keep", "drop"]), default=None,
              help="--to lerobot from Minari or episode-frame: keep the observation after the last action as one more "
                   "frame, or drop it.")
@click.option("--task", default=None, help="--to lerobot: the task of episodes that name none.")
@click.option("--images", type=click.Choice(["video", "image"]), default=None,
              help="--to lerobot: image fields as LeRobot video features (encoded) or image features (PNG).")
@click.option("--video-codec", type=click.Choice(["av1", "h264", "hevc"]), default=None,
              help="--to lerobot: the codec of image fields encoded as video (default av1, as LeRobot records).")
@click.option("--backend", type=click.Choice(["hdf5", "arrow", "parquet"]), default=None,
              help="--to minari: 0.5's data_format (default: the source's, else hdf5).")
@click.option("--image-encoding", type=click.Choice(["png", "jpeg"]), default=None,
              help="--to rlds from LeRobot: how video frames are encoded (png: lossless).")
@click.option("--force", is_flag=True, help="Replace a dataset of the target format already at OUT.")
@click.option("--progress/--no-progress", default=True, help="Show progress bars (only on a terminal).")
@allow_pickle_option
@storage_options_option
@json_option
@quiet_option
@handle_errors
def convert_command(src: str, out: str, to: str, source_format: str | None, keep: str | None, version: str | None,
                    fps: float | None, final_observation: str | None, task: str | None, images: str | None,
                    video_codec: str | None, backend: str | None,
                    image_encoding: str | None, force: bool, progress: bool,
                    allow_pickle: bool, storage_options: dict[str, Any] | None, as_json: bool, quiet: bool) -> None:
    """Convert the dataset SRC into another format at OUT: import into a temporary episode dataset
    beside OUT (removed after; kept with --keep), then export. SRC's format is detected unless --from.

    Where the formats' conventions differ (Minari's final observation, video vs frames, tasks vs
    language instructions) the mapping in docs/robotics.md applies; what was mapped, derived,
    approximated and dropped is written beside OUT (OUT.report.json, OUT.report.txt).

    \b
    Example:
      shardstore convert ./robo/1.0.0 ./robo-minari --to minari
      shardstore convert ~/.minari/datasets/door-v0 ./door-rlds/1.0.0 --to rlds --json
      shardstore convert ./il-task ./il-minari --to minari --allow-pickle
    """
    from .convert.any_to_any import convert
    from .prepare import _sigterm_unwinds

    show = progress and not quiet and not as_json and sys.stderr.isatty()
    report = _sigterm_unwinds(convert)(
        src, out, to=to, source_format=source_format, keep=keep, allow_pickle=allow_pickle, force=force,
        progress=show, storage_options=storage_options, version=version, fps=fps, backend=backend,
        final_observation=final_observation, task=task, images=images, video_codec=video_codec,
        image_encoding=image_encoding,
    )
    if as_json:
        echo_json(report.to_dict())
    elif not quiet:
        m = report.mapping
        click.echo(f"Converted {src} ({report.source_format}) to {out} ({report.target_format}) in {report.seconds:.1f} s: "
                   f"{_plural(len(m.mapped), 'field')} mapped, {len(m.derived)} derived, "
                   f"{len(m.approximated)} approximated, {len(m.dropped)} dropped; report: {report.report_files[1]}")


# ----- edit ----------------------------------------------------------------------------------------
@main.group("edit")
def edit_group() -> None:
    """Edit an episode dataset (an import of any format): delete, keep, filter, split, merge, rename or
    drop fields, set tasks; videos kept whole (no frame decoded or encoded), stats recomputed from the values.

    \b
    Example:
      shardstore edit delete-episodes ./ds ./ds_clean --episodes 3,7,10-20
    """


def edit_output_options(fn: F) -> F:
    """DATASET [OUT], --in-place, --force, --progress, --json, --quiet: shared by the one-input edits."""
    for option in reversed(
        [
            click.argument("dataset"),
            click.argument("out", required=False, type=click.Path(file_okay=False)),
            click.option("--in-place", is_flag=True, help="Replace DATASET with the result (committed atomically; no OUT)."),
            click.option("--force", is_flag=True, help="Replace a dataset already at OUT."),
            click.option("--to", type=click.Choice(EDIT_TARGETS), expose_value=False, callback=_remember_edit_target,
                         help="Write OUT in this format (its export's defaults), in the same process: "
                              "the edited dataset is a temporary one, removed after."),
            click.option("--progress/--no-progress", default=True, help="Show a progress bar by steps (only on a terminal)."),
            json_option,
            quiet_option,
            handle_errors,
        ]
    ):
        fn = option(fn)
    return fn


EDIT_TARGETS = ("lerobot", "minari", "rlds", "episode-wds")


def _remember_edit_target(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--to`` is the same for every one-input edit and used only by ``run_edit``: kept on the
    context rather than added to each command's parameters."""
    ctx.meta["shardstore.edit_to"] = value


def run_edit(op: Callable[..., Any], *args: Any, progress: bool, quiet: bool, as_json: bool, **options: Any) -> None:
    """Run one edit (SIGTERM unwinds it like Ctrl-C: the staging folder is removed) and print its report."""
    from .prepare import _sigterm_unwinds

    show = progress and not quiet and not as_json and sys.stderr.isatty()
    to = click.get_current_context().meta.get("shardstore.edit_to")
    if to:
        report, exported = _edit_to(op, to, *args, progress=show, **options)
    else:
        report, exported = _sigterm_unwinds(op)(*args, progress=show, **options), None
    if as_json:
        echo_json({**report.to_dict(), **({"to": to, "exported": exported} if to else {})})
    elif not quiet:
        for line in report.lines():
            click.echo(line)
        if to:
            click.echo(f"exported as {to}: {report.out}")


def _edit_to(op: Callable[..., Any], to: str, dataset: str, out: str | None, *, progress: bool,
             **options: Any) -> tuple[Any, Any]:
    """An edit whose OUT is in format ``to``: the edit into a scratch folder beside OUT, exported from
    there, the scratch removed (OUT is written by the export's own commit: the old one or the new)."""
    import dataclasses

    from .convert.any_to_any import export_to, summary_of
    from .episodes.staging import scratch_beside
    from .errors import ConfigError
    from .prepare import _sigterm_unwinds

    if out is None or options.get("in_place"):
        raise ConfigError("--to writes a new dataset at OUT: give OUT, without --in-place", member="--to")
    with scratch_beside(out) as scratch:
        edited = os.path.join(scratch, "dataset")
        report = _sigterm_unwinds(op)(dataset, edited, progress=progress, **{**options, "force": False})
        exported = _sigterm_unwinds(export_to)(edited, out, to=to, force=options.get("force", False))
    return dataclasses.replace(report, out=os.path.abspath(out)), summary_of(exported)


@edit_group.command("delete-episodes")
@edit_output_options
@click.option("--episodes", required=True, help="Episode numbers to delete: 3,7,10-20.")
def edit_delete_command(dataset: str, out: str | None, episodes: str, in_place: bool, force: bool, progress: bool,
                        as_json: bool, quiet: bool) -> None:
    """Delete episodes; the rest are renumbered 0..n-1 in order.

    \b
    Example:
      shardstore edit delete-episodes ./ds ./ds_clean --episodes 3,7,10-20
      shardstore edit delete-episodes ./ds --in-place --episodes 0
    """
    from .edit import delete_episodes

    run_edit(delete_episodes, dataset, out, episodes=episodes, in_place=in_place, force=force, progress=progress,
             quiet=quiet, as_json=as_json)


@edit_group.command("keep-episodes")
@edit_output_options
@click.option("--episodes", required=True, help="Episode numbers to keep: 3,7,10-20.")
def edit_keep_command(dataset: str, out: str | None, episodes: str, in_place: bool, force: bool, progress: bool,
                      as_json: bool, quiet: bool) -> None:
    """Keep only some episodes, renumbered 0..n-1 in order.

    \b
    Example:
      shardstore edit keep-episodes ./ds ./ds_small --episodes 0-9
    """
    from .edit import keep_episodes

    run_edit(keep_episodes, dataset, out, episodes=episodes, in_place=in_place, force=force, progress=progress,
             quiet=quiet, as_json=as_json)


@edit_group.command("filter")
@edit_output_options
@click.option("--where", required=True,
              help="Keep episodes for which this holds: names episode, length, task, tasks, split, meta.NAME; "
                   "and/or/not, comparisons, in, + - * / // %.")
def edit_filter_command(dataset: str, out: str | None, where: str, in_place: bool, force: bool, progress: bool,
                        as_json: bool, quiet: bool) -> None:
    """Keep the episodes an expression holds for (a small safe language, never eval).

    \b
    Example:
      shardstore edit filter ./ds ./ds_long --where 'length >= 100 and "cube" in task'
    """
    from .edit import filter_episodes

    run_edit(filter_episodes, dataset, out, where=where, in_place=in_place, force=force, progress=progress,
             quiet=quiet, as_json=as_json)


@edit_group.command("split")
@edit_output_options
@click.option("--ratio", default=None, help="train,val,test weights, e.g. 8,1,1.")
@click.option("--seed", type=int, default=None, help="Shuffle the episodes with this seed before cutting (default: in order).")
@click.option("--split", "lists", multiple=True, metavar="NAME=EPISODES",
              help="Put these episodes in split NAME (repeatable, e.g. --split val=40-44); the rest go to train.")
def edit_split_command(dataset: str, out: str | None, ratio: str | None, seed: int | None, lists: tuple[str, ...],
                       in_place: bool, force: bool, progress: bool, as_json: bool, quiet: bool) -> None:
    """Split the episodes into train/val/test anew, by ratio or by episode lists.

    \b
    Example:
      shardstore edit split ./ds ./ds_split --ratio 8,1,1 --seed 0
      shardstore edit split ./ds ./ds_split --split val=40-44 --split test=45-49
    """
    from .edit import split

    chosen = None
    if lists:
        chosen = {}
        for item in lists:
            name, sep, listed = item.partition("=")
            if not sep or not name:
                raise click.UsageError(f"--split {item!r}: use NAME=EPISODES, e.g. val=40-44")
            chosen[name] = listed
    run_edit(split, dataset, out, ratio=ratio, seed=seed, episodes=chosen, in_place=in_place, force=force,
             progress=progress, quiet=quiet, as_json=as_json)


@edit_group.command("merge")
@click.argument("out", type=click.Path(file_okay=False))
@click.argument("datasets", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Replace a dataset already at OUT.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar by steps (only on a terminal).")
@json_option
@quiet_option
@handle_errors
def edit_merge_command(out: str, datasets: tuple[str, ...], force: bool, progress: bool, as_json: bool,
                       quiet: bool) -> None:
    """Merge episode datasets with the same fields and fps into OUT; tasks merged by text, episodes renumbered.

    \b
    Example:
      shardstore edit merge ./all ./monday ./tuesday
    """
    from .edit import merge

    run_edit(merge, out, list(datasets), force=force, progress=progress, quiet=quiet, as_json=as_json)


@edit_group.command("rename-field")
@edit_output_options
@click.option("--field", "old", required=True, help="The field to rename.")
@click.option("--to", "new", required=True, help="Its new name.")
def edit_rename_command(dataset: str, out: str | None, old: str, new: str, in_place: bool, force: bool,
                        progress: bool, as_json: bool, quiet: bool) -> None:
    """Rename a field (its stats and the source's feature list too).

    \b
    Example:
      shardstore edit rename-field ./ds ./ds2 --field observation.state --to observation.joints
    """
    from .edit import rename_field

    run_edit(rename_field, dataset, out, old=old, new=new, in_place=in_place, force=force, progress=progress,
             quiet=quiet, as_json=as_json)


@edit_group.command("drop-field")
@edit_output_options
@click.option("--field", "fields", required=True, multiple=True, help="A field to drop (repeatable).")
def edit_drop_command(dataset: str, out: str | None, fields: tuple[str, ...], in_place: bool, force: bool,
                      progress: bool, as_json: bool, quiet: bool) -> None:
    """Drop fields.

    \b
    Example:
      shardstore edit drop-field ./ds ./ds2 --field observation.image
    """
    from .edit import drop_field

    run_edit(drop_field, dataset, out, field=list(fields), in_place=in_place, force=force, progress=progress,
             quiet=quiet, as_json=as_json)


@edit_group.command("set-task")
@edit_output_options
@click.option("--task", required=True, help="The task text to set.")
@click.option("--episodes", default=None, help="Only these episodes: 3,7,10-20 (default: all).")
@click.option("--where", default=None, help="Only episodes for which this expression holds (see `edit filter`).")
def edit_set_task_command(dataset: str, out: str | None, task: str, episodes: str | None, where: str | None,
                          in_place: bool, force: bool, progress: bool, as_json: bool, quiet: bool) -> None:
    """Set the task of episodes (by list or expression; LeRobot's task_index rewritten).

    \b
    Example:
      shardstore edit set-task ./ds ./ds2 --task "pick the red cube" --episodes 0-9
    """
    from .edit import set_task

    run_edit(set_task, dataset, out, task=task, episodes=episodes, where=where, in_place=in_place, force=force,
             progress=progress, quiet=quiet, as_json=as_json)


def run(args: list[str] | None = None, prog_name: str = "shardstore") -> None:
    """The ``shardstore`` command (the console script, ``python -m shardstore``): ``main``, and after
    a failure an exit that skips the interpreter's teardown. pyarrow's thread pools can abort the
    process there when an error left one of their reads behind ("terminate called without an active
    exception", exit -6 after the error line; apache/arrow#34314). The failed command's work is
    undone before (with-blocks, staging): only the teardown is skipped. A success exits as usual."""
    try:
        main(args=args, prog_name=prog_name)
    except SystemExit as e:
        if e.code is None or e.code == 0:
            raise
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.code if isinstance(e.code, int) else 1)


if __name__ == "__main__":
    run()
