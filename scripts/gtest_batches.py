#!/usr/bin/env python3
"""Runs the tests ctest would run, each GoogleTest binary in a few processes instead of one per test.

ctest starts a process for every test gtest_discover_tests registered (about 1,300 here), which on a
2-core machine costs more than the tests themselves, and far more under a sanitizer (ASan, TSan and
the OpenMP tool start with every process). This runs exactly the tests ctest selects
(`ctest --show-only=json-v1`, with the same -R / -E / -L selection, skipping what ctest would skip as
DISABLED), grouped by binary, arguments and environment, each group split into --jobs gtest shards
(GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX) with the tests named in --gtest_filter; tests that are not
gtest cases (scripts registered with add_test) run through ctest itself. It then checks that every
selected test ran in some shard, and fails on any failed test, crash, timeout or missing test.

  scripts/gtest_batches.py --test-dir build [-j 2] [--timeout 1800] [-R regex] [-E regex] [-L label]

Exit status 0 when every selected test passed or was skipped by the test itself (GTEST_SKIP).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

FILTER = "--gtest_filter="


def selected_tests(args):
    cmd = ["ctest", "--test-dir", args.test_dir, "--show-only=json-v1"]
    for flag, value in (("-R", args.R), ("-E", args.E), ("-L", args.L)):
        if value:
            cmd += [flag, value]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def props(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def groups_of(tests):
    """(gtest groups: key -> [names]), [other test names], [disabled names]."""
    groups, others, disabled = {}, [], []
    for t in tests:
        p = props(t)
        if p.get("DISABLED"):
            disabled.append(t["name"])
            continue
        cmd = t.get("command") or []
        filt = [a for a in cmd if a.startswith(FILTER)]
        if len(filt) != 1:
            others.append(t["name"])
            continue
        rest = tuple(a for a in cmd if not a.startswith(FILTER))
        env = tuple(p.get("ENVIRONMENT", []))
        key = (rest, env, p.get("WORKING_DIRECTORY", os.getcwd()))
        groups.setdefault(key, []).append(filt[0][len(FILTER):])
    return groups, others, disabled


# "[       OK ] Suite.Name (3 ms)", "[  FAILED  ] Inst/Suite.Name/0, where GetParam() = ... (3 ms)"
RESULT = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] ([^\s,]+)(?:,.*)? \(\d+ ms\)$")


def run_shard(key, names, shard, shards, timeout):
    cmd, env_list, cwd = key
    env = dict(os.environ)
    for kv in env_list:
        k, _, v = kv.partition("=")
        env[k] = v
    env["GTEST_TOTAL_SHARDS"] = str(shards)
    env["GTEST_SHARD_INDEX"] = str(shard)
    # The names go through a file-free filter: ':'-joined, as gtest reads it.
    argv = [cmd[0], FILTER + ":".join(names), "--gtest_print_time=1", *cmd[1:]]
    t0 = time.time()
    with tempfile.TemporaryFile(mode="w+") as log:
        try:
            rc = subprocess.run(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        log.seek(0)
        text = log.read()
    results = {}
    for line in text.splitlines():
        m = RESULT.match(line)
        if m:
            results[m.group(2)] = m.group(1)
    return {"binary": os.path.basename(cmd[0]), "shard": shard, "rc": rc, "text": text,
            "results": results, "seconds": time.time() - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test-dir", required=True)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per shard process")
    ap.add_argument("-R")
    ap.add_argument("-E")
    ap.add_argument("-L")
    args = ap.parse_args()

    tests = selected_tests(args)
    groups, others, disabled = groups_of(tests)
    if not tests:
        print(f"gtest_batches: ctest selects no test in {args.test_dir}", file=sys.stderr)
        return 1
    t0 = time.time()
    jobs = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for key, names in groups.items():
            shards = max(1, min(args.jobs, len(names)))
            for s in range(shards):
                jobs.append((key, names, pool.submit(run_shard, key, names, s, shards, args.timeout)))
        other_rc = 0
        if others:
            regex = "^(" + "|".join(re.escape(n) for n in others) + ")$"
            other_rc = subprocess.run(["ctest", "--test-dir", args.test_dir, "--output-on-failure",
                                       "--timeout", str(int(args.timeout)), "-R", regex]).returncode
        shards_done = [(key, names, f.result()) for key, names, f in jobs]

    bad = []
    seen = {}  # (binary and arguments, test name) -> result: two binaries may hold the same names
    for key, _names, r in shards_done:
        seen.update({(key, n): v for n, v in r["results"].items()})
        failed = [n for n, v in r["results"].items() if v == "FAILED"]
        if r["rc"] != 0 or failed:
            bad.append(r)
    passed = sum(v == "OK" for v in seen.values())
    skipped = sum(v == "SKIPPED" for v in seen.values())
    failed = sorted(f"{os.path.basename(k[0][0])}: {n}" for (k, n), v in seen.items() if v == "FAILED")
    wanted = [(key, n) for key, names in groups.items() for n in names]
    missing = [f"{os.path.basename(k[0][0])}: {n}" for k, n in wanted if (k, n) not in seen]
    for r in bad:
        print(f"---- {r['binary']} shard {r['shard']}: exit {r['rc']} ----")
        print(r["text"][-20000:])
    for _key, _names, r in shards_done:
        print(f"gtest_batches: {r['binary']} shard {r['shard']}: {len(r['results'])} tests in {r['seconds']:.0f} s")
    print(f"gtest_batches: {len(wanted)} gtest cases in {len(groups)} binaries/argument sets, "
          f"{len(jobs)} processes: {passed} passed, {skipped} skipped by the test, {len(failed)} failed, "
          f"{len(missing)} did not run; {len(others)} other ctest test(s): "
          f"{'passed' if other_rc == 0 else 'FAILED'}; {len(disabled)} disabled; {time.time() - t0:.0f} s")
    for n in failed:
        print(f"  FAILED: {n}")
    for n in missing[:50]:
        print(f"  DID NOT RUN: {n}")
    ok = not bad and not failed and not missing and other_rc == 0
    print(f"gtest_batches: {'100% tests passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
