#!/usr/bin/env python3
"""Rewrites a CUDA source file into C++ that compiles against cuda_emu (tests/cuda_emu).

Usage: emu_rewrite.py INPUT.cu OUTPUT.cpp [LINE_NAME]

LINE_NAME: the file name the #line directive gives (default INPUT.cu as given). CMake passes
the input's path relative to the build folder, where the compiler runs: the generated file is
then the same in every clone folder, and so is its object (the compiler cache reuses it).

Only the constructs a C++ compiler cannot parse through macros are rewritten, each in
place and on the same lines (a #line directive keeps file names and line numbers, so
compiler errors, sanitizer reports and the emulator's messages point at the .cu file):

  kernel<T, 2><<<grid, block, smem, stream>>>(args)
      -> ::cuda_emu::detail::launch(::cuda_emu::detail::LaunchCfg(grid, block, smem, stream),
                                    kernel<T, 2>, "kernel<T, 2>", BOUND, __FILE__, __LINE__)(args)
         BOUND = the first argument of the kernel's __launch_bounds__ in this file, else 0
  extern __shared__ [__align__(n)] T name[];
      -> T* name = ::cuda_emu::detail::dynamic_shared_as<T>();
  __shared__ [__align__(n)] T name[d0][d1];          (inside a function)
      -> auto& name = ::cuda_emu::detail::block_shared<T[d0][d1], n>("file:line:name");

Everything else (keywords, built-ins, intrinsics) is handled by cuda_emu.h.
"""
import re
import sys


def code_mask(src):
    """True for each character that is code (not inside a comment, string or char literal)."""
    mask = [True] * len(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            mask[k] = False
        i = j
    return mask


def match_paren(src, i, open_c="(", close_c=")"):
    """Index just past the bracket closing the one at src[i]."""
    depth = 0
    for j in range(i, len(src)):
        if src[j] == open_c:
            depth += 1
        elif src[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SystemExit(f"emu_rewrite: unbalanced {open_c} at offset {i}")


def first_arg(text):
    depth = 0
    for k, c in enumerate(text):
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        elif c == "," and depth == 0:
            return text[:k].strip()
    return text.strip()


def launch_bounds(src, mask):
    bounds = {}
    for m in re.finditer(r"__launch_bounds__\s*\(", src):
        if not mask[m.start()]:
            continue
        end = match_paren(src, m.end() - 1)
        arg = first_arg(src[m.end() : end - 1])
        name = re.match(r"\s*(?:void\s+)?(\w+)\s*\(", src[end:])
        if name:
            bounds[name.group(1)] = arg
    return bounds


def kernel_expr_start(src, i):
    """Start of the kernel expression (name or template-id) that ends just before src[i]."""
    j = i
    while j > 0 and src[j - 1].isspace():
        j -= 1
    if j > 0 and src[j - 1] == ">":
        depth = 0
        while j > 0:
            j -= 1
            if src[j] == ">":
                depth += 1
            elif src[j] == "<":
                depth -= 1
                if depth == 0:
                    break
        while j > 0 and src[j - 1].isspace():
            j -= 1
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_:"):
        j -= 1
    return j


def rewrite(src, path):
    mask = code_mask(src)
    bounds = launch_bounds(src, mask)
    edits = []  # (start, end, replacement)

    for m in re.finditer(r"<<<", src):
        if not mask[m.start()]:
            continue
        close = src.find(">>>", m.end())
        if close < 0:
            raise SystemExit(f"{path}: '<<<' without '>>>'")
        start = kernel_expr_start(src, m.start())
        expr = src[start : m.start()].strip()
        base = re.match(r"[\w:]+", expr).group(0).split("::")[-1]
        cfg = src[m.end() : close]
        after = re.match(r"\s*\(", src[close + 3 :])
        if not after:
            raise SystemExit(f"{path}: launch of {expr} without an argument list")
        quoted = expr.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
        repl = (
            f"::cuda_emu::detail::launch(::cuda_emu::detail::LaunchCfg({cfg}), {expr}, \"{quoted}\", "
            f"{bounds.get(base, '0')}, __FILE__, __LINE__)("
        )
        edits.append((start, close + 3 + after.end(), repl))

    decl = r"(?:__align__\s*\(\s*(\d+)\s*\)\s+)?((?:[\w:]+(?:\s*<[^;{}]*?>)?\s*\**\s+)+?)(\w+)\s*"
    for m in re.finditer(r"\bextern\s+__shared__\s+" + decl + r"\[\s*\]\s*;", src):
        if not mask[m.start()]:
            continue
        typ = m.group(2).strip()
        edits.append((m.start(), m.end(), f"{typ}* {m.group(3)} = ::cuda_emu::detail::dynamic_shared_as<{typ}>();"))

    for m in re.finditer(r"\b__shared__\s+" + decl + r"((?:\[[^\]]*\]\s*)*);", src):
        if not mask[m.start()] or re.search(r"\bextern\s+$", src[max(0, m.start() - 16) : m.start()]):
            continue
        align, typ, name, dims = m.group(1), m.group(2).strip(), m.group(3), re.sub(r"\s+", "", m.group(4))
        line = src.count("\n", 0, m.start()) + 1
        key = f"{path.split('/')[-1]}:{line}:{name}"
        targs = f"{typ}{dims}" + (f", {align}" if align else "")
        edits.append((m.start(), m.end(), f'auto& {name} = ::cuda_emu::detail::block_shared<{targs}>("{key}");'))

    edits.sort()
    out, pos = [], 0
    for start, end, repl in edits:
        if start < pos:
            raise SystemExit(f"{path}: overlapping rewrites at offset {start}")
        # keep the line count: newlines inside the replaced text move to the end
        out.append(src[pos:start])
        out.append(repl + "\n" * (src.count("\n", start, end) - repl.count("\n")))
        pos = end
    out.append(src[pos:])
    return f'#line 1 "{path}"\n' + "".join(out)


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    src_path, out_path = sys.argv[1], sys.argv[2]
    with open(src_path, encoding="utf-8") as f:
        src = f.read()
    text = rewrite(src, sys.argv[3] if len(sys.argv) == 4 else src_path)
    try:
        with open(out_path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
