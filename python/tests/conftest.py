"""Makes `adaptiveload` importable from an in-place build (setup.py build_ext --inplace)
when it is not installed, and holds shared paths."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATASETS = os.path.normpath(os.path.join(REPO, "..", "shared", "datasets"))

try:
    import adaptiveload  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import adaptiveload  # noqa: F401
