"""Manifest inputs of the sampler -> the core's Manifest (adaptiveload._C.Manifest).

A manifest is a CSV / JSONL path (or a list of paths, rows numbered across them in order),
a list of dicts (one per row), or a dict of columns. Columns: path, num_frames, height,
width, fps (fps empty, None or NaN = image) and an optional caption (named `caption` or
`text`, not both). Row ids are 0-based positions, as in the core.
"""
import os
from collections.abc import Mapping
from typing import Any, List

from . import _C

_REQUIRED = ("path", "num_frames", "height", "width")
_CAPTION = ("caption", "text")  # the caption's two names (the core readers take the same)


def _caption_key(keys: Any, where: str) -> Any:
    """The caption's key among `keys` (None when absent); both names is an error, as in the files."""
    found = [k for k in _CAPTION if k in keys]
    if len(found) > 1:
        raise ValueError(f"manifest: {where} has both 'caption' and 'text', two names of the caption; keep one")
    return found[0] if found else None


def _cell(v: Any, col: str) -> str:
    if v is None:
        return ""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()  # numpy / torch scalars
    if isinstance(v, float):
        if v != v:  # NaN: a missing value (how pandas reads an empty fps)
            return ""
        if col != "fps" and v.is_integer():
            return str(int(v))
        return repr(v)
    return str(v)


def _column(values: Any, col: str) -> List[str]:
    if hasattr(values, "tolist"):
        values = values.tolist()  # numpy arrays, tensors, pandas Series
    return [_cell(v, col) for v in values]


def _add_columns(m: "_C.Manifest", cols: Mapping, source: str, skip: bool) -> None:
    missing = [c for c in _REQUIRED if c not in cols]
    if missing:
        raise ValueError(
            f"manifest: the dict of columns has no {', '.join(repr(c) for c in missing)} column "
            f"(columns are {', '.join(_REQUIRED)} and optional fps; got {sorted(map(str, cols))})"
        )
    data = {c: _column(cols[c], c) for c in _REQUIRED}
    n = len(data["path"])
    data["fps"] = _column(cols["fps"], "fps") if "fps" in cols else [""] * n
    key = _caption_key(cols, "the dict of columns")
    if key is not None:
        data[key] = _column(cols[key], key)
    for c, v in data.items():
        if len(v) != n:
            raise ValueError(f"manifest: column {c!r} has {len(v)} values but 'path' has {n}")
    captions = data[key] if key is not None else []
    m.add_rows(data["path"], data["num_frames"], data["height"], data["width"], data["fps"], source, skip, captions)


def load_manifest(manifest: Any, on_bad_row: str = "error") -> "_C.Manifest":
    """The core Manifest of `manifest`; bad rows raise ValueError (on_bad_row='error') or are
    kept as unusable rows (on_bad_row='skip', listed in Manifest.bad_rows)."""
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
    skip = on_bad_row == "skip"
    m = _C.Manifest()
    if isinstance(manifest, (str, os.PathLike)):
        paths = [manifest]
    elif isinstance(manifest, (list, tuple)) and manifest and all(isinstance(p, (str, os.PathLike)) for p in manifest):
        paths = list(manifest)
    else:
        paths = None
    if paths is not None:
        for p in paths:
            p = os.fspath(p)
            if not (os.path.isfile(p) or os.path.isdir(p)):  # a folder: a latent cache (cache_folder.h)
                raise FileNotFoundError(f"manifest: no such file or cache folder: {p!r}")
            m.load(p, skip)
        return m
    if isinstance(manifest, Mapping):
        _add_columns(m, manifest, "<manifest columns, 0-based row>", skip)
        return m
    if isinstance(manifest, (list, tuple)):
        for i, row in enumerate(manifest):
            if not isinstance(row, Mapping):
                raise TypeError(f"manifest: row {i} is a {type(row).__name__}, expected a dict with keys "
                                f"{', '.join(_REQUIRED)} and optional fps")
            missing = [c for c in _REQUIRED if c not in row]
            if missing:
                raise ValueError(f"manifest: row {i} has no {', '.join(repr(c) for c in missing)} key")
        keys = set()
        for i, row in enumerate(manifest):
            if _caption_key(row, f"row {i}") is not None:
                keys.add(_caption_key(row, f"row {i}"))
        cols = {c: [row.get(c) for row in manifest] for c in _REQUIRED + ("fps",)}
        if keys:  # either name, row by row
            cols["caption"] = [row.get("caption", row.get("text")) for row in manifest]
        _add_columns(m, cols, "<manifest list, 0-based row>", skip)
        return m
    raise TypeError(
        f"manifest must be a CSV/JSONL path, a list of paths, a list of dicts or a dict of columns, "
        f"not {type(manifest).__name__}"
    )
