"""A fixed subset of manifests (train_dit --subset), and what a plan leaves out said on stderr
with each row's file and line: never silently."""
import csv
import json
import re
import sys
from typing import List

SUBSET_ROW = re.compile(r"<manifest list, 0-based row>:(\d+)")  # how the sampler names a row of a list of dicts


MANIFEST_KEYS = ("path", "num_frames", "height", "width")


def load_subset(paths: List[str], n: int, on_bad_row: str) -> tuple:
    """A fixed subset: n rows of each manifest (CSV or JSONL), rows floor(k * rows / n).
    Returns (rows as dicts, each row's "file:line", messages of the JSONL lines that are not
    an object with the manifest's keys, left out under on_bad_row 'skip'; 'error' raises
    ValueError naming file and line). The sampler checks the rows' fields."""
    out, origins, bad = [], [], []
    for path in paths:
        rows, lines = [], []
        with open(path, newline="") as f:
            if path.endswith((".jsonl", ".json")):
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line.strip())
                        why = "" if isinstance(row, dict) else f"a JSON {type(row).__name__}, not an object"
                    except ValueError as e:
                        why = f"not JSON ({e})"
                    if not why:
                        missing = [k for k in MANIFEST_KEYS if k not in row]
                        why = f"no {', '.join(repr(k) for k in missing)} key" if missing else ""
                    if why:
                        if on_bad_row == "error":
                            raise ValueError(f"{path}:{line_no}: {why}; --on-bad-row skip leaves bad rows out")
                        bad.append(f"{path}:{line_no}: {why}")
                        continue
                    rows.append(row)
                    lines.append(f"{path}:{line_no}")
            else:
                reader = csv.DictReader(f)
                for row in reader:
                    rows.append(row)
                    lines.append(f"{path}:{reader.line_num}")
        k = min(n, len(rows))
        for i in range(k):
            out.append(rows[i * len(rows) // k])
            origins.append(lines[i * len(rows) // k])
    return out, origins, bad


def locate(message: str, origins: List[str]) -> str:
    """A sampler message about row K of the subset, with the row's file and line."""
    return SUBSET_ROW.sub(lambda m: f"{origins[int(m.group(1))]} (subset row {m.group(1)})", message)


def report_left_out(sampler, bad_rows: List[str], origins: List[str], shown: int = 5) -> None:
    """Says on stderr what the plan leaves out, never silently: bad rows skipped (--on-bad-row
    skip) and rows that fit no bucket or are oversize (--on-oversize skip), each with the
    first `shown` messages (origins: a subset's rows' file:line)."""
    def say(head: str, lines: List[str]) -> None:
        print(f"train_dit.py: {head}", file=sys.stderr)
        for m in lines[:shown]:
            print(f"  {m}", file=sys.stderr)
        if len(lines) > shown:
            print(f"  ... and {len(lines) - shown} more", file=sys.stderr)

    bad = list(bad_rows) + [locate(m, origins) for m in sampler.bad_rows]
    if bad:
        say(f"skipped {len(bad)} bad manifest row(s) (--on-bad-row skip):", bad)
    left = sampler.left_out
    if left:
        say(f"{len(left)} row(s) not planned (they fit no bucket of the grid, or are oversize under "
            f"--on-oversize skip):", [f"row {row}: {why}" for row, why in left])
