"""The ``shardstore`` command: thin click wrappers over the Python API.

Each command calls one public function, prints its result (``--json`` for scripts) and turns a
``ShardstoreError`` into a one-line message and exit code 1. This module touches neither
sqlite3 nor fsspec directly.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from . import nvmeta
from .errors import ShardstoreError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(fn: F) -> F:
    """Turn library errors into ``shardstore: <message>`` on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ShardstoreError as e:
            click.echo(f"shardstore: error: {e}", err=True)
            sys.exit(1)
        except BrokenPipeError:  # `shardstore ls | head`
            sys.stderr.close()
            sys.exit(0)

    return wrapper  # type: ignore[return-value]


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


def quiet_option(fn: F) -> F:
    """``-q/--quiet``: print nothing but errors (the exit code still tells the result)."""
    return click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")(fn)


def split_option(fn: F) -> F:
    """``--split S``: one split of split.yaml (train, val, test, ...); default: every shard."""
    return click.option("--split", default=None, help="Only this split of split.yaml (e.g. train); default: all shards.")(fn)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="shardstore")
def main() -> None:
    """Index WebDataset tar shards and read them at random, locally or on S3.

    \b
    Example:
      shardstore prepare ./my-dataset --split-ratio 8,1,1 --non-interactive
      shardstore info ./my-dataset
    """


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
@click.option("--num-workers", type=int, default=None, help="Worker processes for scanning (default: CPU count).")
@click.option("--shuffle-tars", is_flag=True, help="Shuffle the shards (seed 42, as Energon) before a ratio split.")
@click.option("--tar-index-only", is_flag=True, help="Only (re)write the .tar.idx files of the shards in .info.json.")
@click.option("--force-overwrite", is_flag=True, help="Prepare again even if .nv-meta exists.")
@click.option("--non-interactive", is_flag=True, help="Never ask; fail if something is missing.")
@click.option("--skip-dataset-yaml", is_flag=True, help="Do not write dataset.yaml.")
@click.option("--sample-type", help="Energon sample class for dataset.yaml (e.g. CaptioningSample) or CrudeWebdataset.")
@click.option("--field-map", help='JSON field map for dataset.yaml, e.g. \'{"image": "jpg", "caption": "txt"}\'.')
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

    interactive = not non_interactive and sys.stdin.isatty() and not as_json and not quiet
    if interactive and not tar_index_only and not update:
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
        )
    if as_json:
        click.echo(report.to_json())
    elif not quiet:
        click.echo(
            f"Prepared {report.path}: {report.shards} shards, {report.samples} samples, {report.parts} parts "
            f"({report.bytes / 1e6:.1f} MB) in {report.seconds:.2f} s"
        )
        for name, c in report.splits.items():
            click.echo(f"  {name}: {c['shards']} shards, {c['samples']} samples")
        click.echo(f"  parts: {', '.join(f'{k} ({v})' for k, v in report.part_names.items())}")
        if report.sample_type is None and not skip_dataset_yaml and not tar_index_only:
            click.echo("  no dataset.yaml written (use --sample-type to create it)")
        for problem in report.problems:
            click.echo(f"  warning: {problem}", err=True)


def _already_prepared(path: str, storage_options: dict[str, Any] | None) -> bool:
    return nvmeta.dataset_kind(path, storage_options) == nvmeta.DatasetKind.WEBDATASET


# ----- inspection: info, check, ls, cat (shardstore/inspection.py, checks.py) -------------------
def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def _format_label(energon_version: str) -> str:
    return "format version not recorded" if energon_version == "unknown" else f"Energon {energon_version} format"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


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
    if as_json:
        echo_json(s.to_dict())
        return
    if s.sample_type is None:
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
    if s.uuid:
        rows.append(("index uuid", s.uuid))
    click.echo(s.url)
    for label, value in rows:
        click.echo(f"  {label:<12} {value}")


@main.command("check")
@click.argument("path")
@click.option("--deep", is_flag=True, help="Also walk every shard's tar headers: each part's range must hold that member.")
@click.option(
    "--ref",
    "refs",
    multiple=True,
    help="Metadataset only (repeatable): PART[field] naming aux files in each primary sample, e.g. "
    "json[image]; STORE:json[image] checks one aux store.",
)
@storage_options_option
@quiet_option
@json_option
@handle_errors
def check_command(
    path: str, deep: bool, refs: tuple[str, ...], storage_options: dict[str, Any] | None, quiet: bool, as_json: bool
) -> None:
    """Check a prepared dataset: schema, shards, .tar.idx files and index agree.

    Checks the .nv-meta files against their schema; that every shard exists with the size it had
    at prepare; that each .tar.idx agrees with index.sqlite and .info.json. With --deep, also reads
    every tar header and checks each part's byte range holds that member. Exits with 1 and lists
    the problems if there are any.

    \b
    Example:
      shardstore check ./ds
      shardstore check ./ds --deep --json
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

    report = check(path, deep=deep, storage_options=storage_options)
    checked = f"{_plural(report.shards, 'shard')}, {_plural(report.samples, 'sample')}"
    if deep:
        checked += f", {_plural(report.parts, 'part')} (deep)"
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
@storage_options_option
@json_option
@handle_errors
def ls_command(
    path: str, split: str | None, limit: int | None, storage_options: dict[str, Any] | None, as_json: bool
) -> None:
    """List sample keys and their parts, one sample per line: KEY<TAB>PART,PART,...

    Streams from the index page by page, so it starts at once on any dataset size. Samples that
    split.yaml excludes are marked "(excluded)". --json prints a JSON array (streamed).

    \b
    Example:
      shardstore ls ./ds --split val --limit 5
      shardstore ls ./ds --json | jq '.[].key'
    """
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
@storage_options_option
@json_option
@handle_errors
def preview_command(path: str, split: str | None, n: int, storage_options: dict[str, Any] | None, as_json: bool) -> None:
    """Print the first N samples for people: text and json parts shown, images as size and shape.

    Never interactive; pickled parts are never unpickled. Excluded samples are skipped.

    \b
    Example:
      shardstore preview ./ds -n 3 --split val
    """
    from .inspection import preview

    items = preview(path, n=n, split=split, storage_options=storage_options)
    if as_json:
        echo_json([{"position": i.position, "key": i.key, "shard": i.shard, "parts": i.parts} for i in items])
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
@storage_options_option
@quiet_option
@handle_errors
def mount_command(
    dataset: str, mountpoint: str, layout: str, foreground: bool, direct_io_min: int | None,
    storage_options: dict[str, Any] | None, quiet: bool,
) -> None:
    """Mount DATASET (a prepared folder, s3:// URL or metadataset YAML) read-only at MOUNTPOINT.

    Returns once the mount answers (the FUSE process runs on in the background) unless
    --foreground. Besides the layout, .by-shard/<shard>/ and .by-split/<split>/ show the same
    members per shard and per split. Unmount with `shardstore umount MOUNTPOINT`.

    \b
    Example:
      shardstore mount ./ds /mnt/ds && ls /mnt/ds | head
      shardstore mount s3://bucket/ds /mnt/ds --layout samples
      shardstore umount /mnt/ds
    """
    from .mount import mount

    handle = mount(
        dataset, mountpoint, layout=layout, foreground=foreground, storage_options=storage_options,
        direct_io_min=direct_io_min,
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


if __name__ == "__main__":
    main()
