"""Makes `adaptiveload` importable from an in-place build (setup.py build_ext --inplace)
when it is not installed, and holds shared paths."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The real manifests (TaiChi-HD clips, COCO val images): ../shared/datasets beside the
# repository, or AL_DATASETS.
DATASETS = os.environ.get("AL_DATASETS") or os.path.normpath(os.path.join(REPO, "..", "shared", "datasets"))

try:
    import adaptiveload  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import adaptiveload  # noqa: F401


def require_datasets(*names):
    """Skips the calling module when the shared manifests are missing."""
    import pytest

    missing = [n for n in names if not os.path.isfile(os.path.join(DATASETS, n))]
    if missing:
        pytest.skip(f"manifests {missing} not found in {DATASETS} (set AL_DATASETS)", allow_module_level=True)
