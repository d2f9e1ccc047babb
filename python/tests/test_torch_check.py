"""import adaptiveload under another torch minor release than the extension was compiled against
fails with a message naming both and the rebuild, not with the loader's undefined symbol."""
import pytest
import torch

from adaptiveload import _torch_check


def test_other_minor_release_refused():
    with pytest.raises(ImportError, match=r"compiled against torch 2\.15\.0\+cu132.*has torch 2\.11\.0.*pip install"):
        _torch_check.check_torch_release("2.11.0", built="2.15.0+cu132")


def test_same_minor_release_accepted():
    _torch_check.check_torch_release("2.11.0+cu130", built="2.11.1")
    _torch_check.check_torch_release("2.15.0", built="2.15.0+cu132")


def test_this_build_matches_this_torch():
    built = _torch_check.built_against()
    if built is None:
        pytest.skip("no build information (a source tree without a build)")
    _torch_check.check_torch_release(torch.__version__)
    assert built.split(".")[:2] == torch.__version__.split(".")[:2]
