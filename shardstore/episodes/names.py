"""Names, paths and path templates taken from a dataset's own files, checked before any file is
opened or written under them.

A robot dataset names files in its metadata (LeRobot's ``data_path`` template, TFDS's
``filepathTemplate``, a kept step key that becomes a tar member, a split name that becomes a YAML
key, ``schema.json``'s ``video_store``). An untrusted dataset must not make an import, an export or
a reader touch a file outside the folder it works in, so every such name goes through one rule:
``storage.contained_path`` (prepare's: no NUL, no absolute path, drive or URL, no ``..``) plus what
a name written to disk or into a tar must not hold either: control characters (a newline in a
name forges a line of YAML or of a listing), backslashes (a separator on Windows and in tar
tools), empty and ``.`` components. ``fill_template`` formats a template with plain fields only
(``{episode_index:06d}``): no attribute or index access, no conversion, a width of at most two
digits (``{episode_index:0400000000d}`` would allocate 400 MB), and checks the result.
"""

from __future__ import annotations

import os
import re
import string
from typing import Any

from ..errors import PathEscapeError
from ..storage import contained_path

__all__ = ["safe_relpath", "safe_name", "fill_template", "MAX_NAME"]

#: Longest name accepted from a dataset (bytes of UTF-8): a file name is at most 255 on every
#: common filesystem; a relative path of a few levels stays well under this.
MAX_NAME = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SPEC = re.compile(r"^0?[0-9]{0,2}d?$")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def safe_relpath(rel: Any, where: str | None = None, what: str = "file name") -> str:
    """``rel`` (a ``/``-separated name from a dataset's own files) as a local relative path, or a
    ``PathEscapeError`` naming ``where`` (the file it came from) and ``what`` it is."""
    if not isinstance(rel, str):
        raise PathEscapeError(f"a {what} must be text, not {type(rel).__name__}", path=where, member=repr(rel))
    try:
        contained_path(rel, "its folder", where)
    except PathEscapeError as e:
        raise PathEscapeError(f"{what}: {e.detail}", path=where, member=e.member) from None
    if not rel or len(rel.encode("utf-8", "surrogatepass")) > MAX_NAME:
        raise PathEscapeError(f"a {what} must hold 1 to {MAX_NAME} bytes", path=where, member=repr(rel[:80]))
    if _CONTROL.search(rel) or "\\" in rel:
        raise PathEscapeError(f"a {what} must hold no control character or backslash: refused", path=where,
                              member=repr(rel))
    parts = rel.split("/")
    if any(p in ("", ".") for p in parts):
        raise PathEscapeError(f"a {what} must be a plain relative path (no empty or '.' part): refused",
                              path=where, member=repr(rel))
    return os.path.join(*parts)


def safe_name(name: Any, where: str | None = None, what: str = "name") -> str:
    """``name`` if it is one plain path component (``safe_relpath`` and no ``/``)."""
    safe_relpath(name, where, what)
    if "/" in name:
        raise PathEscapeError(f"a {what} must be a single name, not a path: refused", path=where, member=repr(name))
    return str(name)


def fill_template(template: Any, where: str, **values: Any) -> str:
    """``template`` (``str.format`` syntax) filled with ``values``, as a checked relative path.

    Only ``{field}`` and ``{field:0Nd}`` with N of at most two digits; a template naming an
    unknown field, using attribute/index access, a conversion or a wider format is refused
    (``PathEscapeError`` naming ``where``) before anything is formatted.
    """
    if not isinstance(template, str):
        raise PathEscapeError(f"a path template must be text, not {type(template).__name__}", path=where)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise PathEscapeError(f"path template {template!r} is malformed: {e}", path=where) from e
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not _FIELD.match(field) or conversion or not _SPEC.match(spec or ""):
            raise PathEscapeError(
                f"path template {template!r}: field {{{field}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}} refused (plain fields and widths up to 99 only)",
                path=where,
            )
        if field not in values:
            raise PathEscapeError(f"path template {template!r} names an unknown field {field!r}", path=where)
    try:
        filled = template.format(**values)
    except (ValueError, TypeError) as e:
        raise PathEscapeError(f"path template {template!r} does not fit its values: {e}", path=where) from e
    return safe_relpath(filled, where, "path the template names").replace(os.sep, "/")
