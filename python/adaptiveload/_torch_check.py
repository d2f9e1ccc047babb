"""The binding adaptiveload._C runs only with the torch minor release it was compiled against
(libtorch's C++ ABI changes between releases): refuse another one with what to do, instead of the
loader's undefined-symbol error. The build writes the release into _build_info.py
(cmake/python_ext.cmake); a source tree without a build has none and is not checked."""


def built_against():
    """The torch version the extension was compiled against, or None (no build information)."""
    try:
        from ._build_info import torch_version
    except ImportError:
        return None
    return torch_version


def check_torch_release(running, built=None):
    """Raises ImportError when `running` (torch.__version__) is another minor release than the
    one the extension was built against (`built`, default: the build's own record)."""
    built = built if built is not None else built_against()
    if built is None:
        return
    if running.split("+")[0].split(".")[:2] != built.split("+")[0].split(".")[:2]:
        raise ImportError(
            f"adaptiveload: its extension was compiled against torch {built}, but this environment has torch "
            f"{running}; a torch extension runs only with the torch release it was built with. Rebuild it here: "
            "pip install --force-reinstall --no-deps --no-cache-dir <the adaptiveload source folder or sdist> "
            "(or, in the repository, python setup.py build_ext --inplace)")
