"""Argument checks of the public Python API, done before anything changes state.

Each check names the argument (as `where`, e.g. "AdaptiveBatchSampler: world_size") and
the allowed values, and raises TypeError for a wrong type, ValueError for a wrong value.
Python's bool is an int; it is refused where a number is meant (world_size=True is a bug).
"""
import math
import numbers
import operator
import os
from typing import Any, Iterable, Optional

# Words of a yes/no option, as the CLI writes them (--checkpointing on|off) and as config
# files and environment variables often do; compared case-insensitively.
_TRUE_WORDS = ("on", "true", "yes", "1")
_FALSE_WORDS = ("off", "false", "no", "0")


def _type_name(v: Any) -> str:
    return type(v).__name__


def integer(v: Any, where: str, lo: int, hi: int, hint: str = "") -> int:
    """v as an int in [lo, hi]: ints and integer-like objects (numpy / torch integer scalars),
    not bool, float or str."""
    if isinstance(v, bool) or not (isinstance(v, numbers.Integral) or hasattr(v, "__index__")):
        raise TypeError(f"{where} must be an integer in [{lo}, {hi}]{hint}, got {_type_name(v)} {v!r}")
    try:
        n = operator.index(v)
    except TypeError:
        raise TypeError(f"{where} must be an integer in [{lo}, {hi}]{hint}, got {_type_name(v)} {v!r}") from None
    if not lo <= n <= hi:
        raise ValueError(f"{where} must be in [{lo}, {hi}]{hint}, got {n}")
    return n


def real(v: Any, where: str, lo: float, hi: float, lo_open: bool = False, hint: str = "",
         hi_open: bool = False) -> float:
    """v as a finite float in [lo, hi] (open at an end with lo_open / hi_open): ints, floats
    and real 0-d scalars (numpy, torch), not bool or str."""
    rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        if hasattr(v, "item") and getattr(v, "ndim", None) == 0:  # a 0-d tensor
            item = v.item()
            if not isinstance(item, bool):
                return real(item, where, lo, hi, lo_open, hint, hi_open)
        raise TypeError(f"{where} must be a number in {rng}{hint}, got {_type_name(v)} {v!r}")
    x = float(v)
    if not math.isfinite(x) or x < lo or x > hi or (lo_open and x == lo) or (hi_open and x == hi):
        raise ValueError(f"{where} must be a finite number in {rng}{hint}, got {v!r}")
    return x


def flag(v: Any, where: str) -> bool:
    """A yes/no option: True / False, 1 / 0, or the words on/off, true/false, yes/no, 1/0
    (any case). Anything else raises: a string such as 'off' is never taken as truthy."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        w = v.strip().lower()
        if w in _TRUE_WORDS:
            return True
        if w in _FALSE_WORDS:
            return False
        raise ValueError(
            f"{where} must be True or False (or one of the words {'/'.join(_TRUE_WORDS)} and "
            f"{'/'.join(_FALSE_WORDS)}), got {v!r}"
        )
    if type(v).__name__ in ("bool_", "bool") and hasattr(v, "item"):  # numpy.bool_, 0-d bool tensors
        return bool(v.item())
    if isinstance(v, numbers.Integral) and int(v) in (0, 1):
        return bool(int(v))
    raise TypeError(f"{where} must be True or False, got {_type_name(v)} {v!r}")


def choice(v: Any, where: str, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    listed = ", ".join(repr(a) for a in allowed)
    if not isinstance(v, str):
        raise TypeError(f"{where} must be one of {listed}, got {_type_name(v)} {v!r}")
    if v not in allowed:
        raise ValueError(f"{where} must be one of {listed}, got {v!r}")
    return v


def string(v: Any, where: str, what: str) -> str:
    """A non-empty str."""
    if not isinstance(v, str):
        raise TypeError(f"{where} must be {what}, got {_type_name(v)} {v!r}")
    if not v:
        raise ValueError(f"{where} must be {what}, got an empty string")
    return v


def name_or_path(v: Any, where: str, what: str) -> str:
    """A preset name or a JSON file path (str or os.PathLike), not empty."""
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str):
        raise TypeError(f"{where} must be a {what} name or a JSON file path (str), got {_type_name(v)} {v!r}")
    if not v:
        raise ValueError(f"{where} must be a {what} name or a JSON file path, got an empty string")
    return v


def optional_file(v: Any, where: str) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str):
        raise TypeError(f"{where} must be a file path (str or os.PathLike) or None, got {_type_name(v)} {v!r}")
    if not os.path.isfile(v):
        raise FileNotFoundError(f"{where}: no such file: {v!r}")
    return v
