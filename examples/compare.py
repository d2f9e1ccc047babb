#!/usr/bin/env python3
"""Run the strategies (by default every one the core registers) through train_dit, the fused
adaLN kernel off and on, and write one table (Markdown and JSON) of measured imbalance,
throughput, peak memory and speedup beside the planner's prediction. The comparison is the
package's adaptiveload.training.compare (its docstring gives the options; --help).

  python examples/compare.py --config tiny --world-size 4 --steps 6 --out-dir out/compare
  python examples/compare.py --strategies balanced --packing both --fused off --epoch --subset 200 --repeat 3
"""
import os
import sys

try:
    import adaptiveload
except ImportError:  # running from a source checkout with the extension built in place
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import adaptiveload

try:
    from adaptiveload.training import compare
except ModuleNotFoundError as e:  # an adaptiveload installed from an older source, without the harness
    if e.name != "adaptiveload.training":
        raise
    sys.exit(f"compare.py: {e}: the adaptiveload imported ({os.path.dirname(adaptiveload.__file__)}) predates "
             "adaptiveload.training; install this checkout's (pip install .) or build it in place (python setup.py "
             "build_ext --inplace) and run with PYTHONPATH=python")

if __name__ == "__main__":
    compare.main(exit_process=True)
