"""The `adaptiveload` command of an installed package (pyproject.toml's [project.scripts]): runs the
C++ tool the wheel carries (adaptiveload/_bin/adaptiveload, the CMake target cli/), with AL_PYTHON
set to this interpreter, the one `adaptiveload calibrate` measures with (unless AL_PYTHON is set)."""
import os
import sys

BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "adaptiveload")


def main():
    if not os.access(BINARY, os.X_OK):
        sys.exit(f"adaptiveload: the command-line tool is not in this install (no {BINARY}); install the package "
                 "with pip (pip install .), which builds it, or run the one scripts/build.sh builds "
                 "(build/cli/adaptiveload)")
    env = dict(os.environ)
    env.setdefault("AL_PYTHON", sys.executable)
    os.execve(BINARY, ["adaptiveload", *sys.argv[1:]], env)


if __name__ == "__main__":
    main()
