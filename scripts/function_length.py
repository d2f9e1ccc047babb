#!/usr/bin/env python3
"""Size checks beside the formatter (scripts/lint.sh): no function over 120 lines without a
reason, no source file over 600 lines.

    scripts/function_length.py [--max-lines 120] [--file-cap 600] [--all] [PATH ...]

PATHs are files or folders (default: src cli python/csrc python/adaptiveload). C++ files
(.cpp .cc .h .hpp .cu .cuh) are read by a brace scanner that blanks comments, string, raw
string and character literals and preprocessor lines first (the #else / #elif branches of a
conditional too, so each function is seen once); Python files by `ast`.

A function longer than --max-lines passes when the comment lines just above it (above its
template line or its decorators) hold a marker with a non-empty reason:

    // long-function: one pass over the buckets; the stages share 9 locals
    # long-function: <reason>

A function's length counts from its first line (return type, `template <...>`, `def`) to its
closing brace or last line. Exit status 1 when anything is over, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from dataclasses import dataclass

CPP_EXTS = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")
DEFAULT_PATHS = ("src", "cli", "python/csrc", "python/adaptiveload")
MARKER = re.compile(r"long-function:(.*)")


@dataclass
class Function:
    path: str
    line: int  # 1-based first line
    length: int
    name: str
    reason: str | None  # None: no marker; "": a marker without a reason


# ---------------------------------------------------------------- C++: blanking


def _skip_string(text: str, i: int, quote: str) -> int:
    """Index just past the literal opened by text[i] == quote (escapes honoured)."""
    i += 1
    while i < len(text) and text[i] != quote and text[i] != "\n":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip_raw_string(text: str, i: int) -> int:
    """Index just past R"delim( ... )delim"; text[i] is the opening quote."""
    open_paren = text.find("(", i)
    delim = text[i + 1 : open_paren]
    end = text.find(")" + delim + '"', open_paren)
    return len(text) if end < 0 else end + len(delim) + 2


def _is_digit_separator(text: str, i: int) -> bool:
    """text[i] == "'" inside a number such as 1'000'000."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_.'"):
        j -= 1
    return j < i and text[j].isdigit()


def _is_raw_prefix(text: str, i: int) -> bool:
    """text[i] == '"' opens a raw string: R"( , u8R"( , LR"( ..."""
    m = re.search(r"(?:^|[^\w])(?:u8|u|U|L)?R$", text[max(0, i - 4) : i])
    return m is not None


def _skip_directive(text: str, i: int) -> int:
    """Index of the newline that ends the preprocessor line starting at text[i] == '#'."""
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 2] == "\n":
            i += 2
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        elif text[i] == "\n" or text.startswith("//", i):
            break
        else:
            i += 1
    return text.find("\n", i) if text.find("\n", i) >= 0 else len(text)


def _blank(out: list[str], text: str, a: int, b: int) -> None:
    """Replaces text[a:b] in out by spaces, keeping newlines (line numbers stay)."""
    for k in range(a, min(b, len(text))):
        if text[k] != "\n":
            out[k] = " "


def _literal_end(text: str, i: int) -> int:
    """End of the comment or literal starting at text[i], or -1 when none starts there."""
    c = text[i]
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return len(text) if end < 0 else end + 2
    if c == '"':
        return _skip_raw_string(text, i) if _is_raw_prefix(text, i) else _skip_string(text, i, '"')
    if c == "'" and not _is_digit_separator(text, i):
        return _skip_string(text, i, "'")
    return -1


def blank_cpp(text: str) -> tuple[str, list[tuple[int, str]]]:
    """The text with comments and literals blanked, and its directives as (offset, text)."""
    out = list(text)
    directives = []
    i, line_start = 0, True
    while i < len(text):
        c = text[i]
        if c == "#" and line_start:
            end = _skip_directive(text, i)
            directives.append((i, text[i:end]))
            _blank(out, text, i, end)
            i = end
            continue
        end = _literal_end(text, i)
        if end >= 0:
            _blank(out, text, i, end)
            i = end
            continue
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        i += 1
    return "".join(out), directives


def blank_other_branches(code: str, directives: list[tuple[int, str]]) -> str:
    """Blanks the #elif / #else branches of each conditional: the #if branch is the one read."""
    out = list(code)
    stack: list[bool] = []  # per open #if: inside a branch after the first
    hidden_from = None
    for offset, directive in directives:
        word = re.match(r"#\s*(\w*)", directive).group(1)
        if word.startswith("if"):
            stack.append(False)
        elif word in ("elif", "else") and stack:
            stack[-1] = True
        elif word == "endif" and stack:
            stack.pop()
        hiding = any(stack)
        if hiding and hidden_from is None:
            hidden_from = offset
        elif not hiding and hidden_from is not None:
            _blank(out, code, hidden_from, offset)
            hidden_from = None
    if hidden_from is not None:
        _blank(out, code, hidden_from, len(code))
    return "".join(out)


# ---------------------------------------------------------------- C++: braces

_ACCESS = re.compile(r"\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+")  # used with .match
_NAMESPACE = re.compile(r"^(?:inline\s+)?namespace\b|^extern\s*$")  # extern "C" (literal blanked)
_CLASS = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union)\b", re.S)
_ENUM = re.compile(r"^(?:template\s*<.*>\s*)?enum\b", re.S)
_QUALIFIERS = r"(?:\s*(?:const|volatile|noexcept|override|final|mutable|&&|&|throw\s*\(\s*\)))*"
_FUNC_TAIL = re.compile(r"(?:\)" + _QUALIFIERS + r"|\btry|\]\s*(?:mutable)?)\s*$")
_TRAILING_RETURN = re.compile(r"\)" + _QUALIFIERS + r"\s*->\s*[^;{}()=]*$")
_CTOR_INIT_TAIL = re.compile(r"\)" + _QUALIFIERS + r"\s*:(?!:).*\}\s*$", re.S)  # ... : a_{x} {


def _strip_access(prefix: str) -> str:
    m = _ACCESS.match(prefix)
    return (prefix[m.end() :] if m else prefix).strip()


def classify(prefix: str) -> str:
    """What a '{' opens at namespace or class scope, from the declaration text before it:
    'scope' (namespace, extern "C", class body: functions inside are read), 'function', or
    'other' (an initializer, an enum)."""
    p = _strip_access(prefix)
    if _NAMESPACE.search(p):
        return "scope"
    if _ENUM.match(p):
        return "other"
    if _CLASS.match(p) and not p.endswith(")"):
        return "scope"
    if _FUNC_TAIL.search(p) or _TRAILING_RETURN.search(p) or _CTOR_INIT_TAIL.search(p):
        return "function"
    return "other"


def function_name(prefix: str) -> str:
    """The name before the parameter list: `Planner::run`, `operator()`, `~Cache`."""
    p = re.sub(r"^template\s*<.*?>\s*", "", _strip_access(prefix), flags=re.S)
    p = re.sub(r"\b(?:__launch_bounds__|__attribute__|alignas)\s*\((?:[^()]|\([^()]*\))*\)", "", p)
    m = re.search(r"([\w:~]*operator\s*(?:\(\)|[^\s(]+))\s*\(", p)
    if m:
        return m.group(1)
    m = re.search(r"([\w:~]+)\s*(?:<[^()]*>)?\s*\(", p)
    return m.group(1) if m else "<lambda>"


def _first_code_offset(code: str, start: int, end: int) -> int:
    """Offset of the first non-blank character of the declaration in code[start:end]."""
    m = _ACCESS.match(code, start, end)
    i = m.end() if m else start
    while i < end and code[i].isspace():
        i += 1
    return i


class _Scanner:
    """Walks the blanked text once, brace by brace, keeping a stack of what each '{' opened."""

    def __init__(self, code: str):
        self.code = code
        self.stack: list[tuple[str, int, str]] = []  # (kind, start offset, name)
        self.decl_start = 0  # where the declaration being read at scope level begins
        self.found: list[tuple[int, int, str]] = []  # (start offset, end offset, name)

    def at_scope_level(self) -> bool:
        return all(kind == "scope" for kind, _, _ in self.stack)

    def open_brace(self, i: int) -> None:
        if not self.at_scope_level():
            self.stack.append(("inner", i, ""))
            return
        prefix = self.code[self.decl_start : i]
        kind = classify(prefix)
        start = _first_code_offset(self.code, self.decl_start, i)
        self.stack.append((kind, start, function_name(prefix) if kind == "function" else ""))
        if kind == "scope":
            self.decl_start = i + 1

    def close_brace(self, i: int) -> None:
        if not self.stack:
            return  # unbalanced (a conditional's branches differ): ignore the stray brace
        kind, start, name = self.stack.pop()
        if kind == "function":
            self.found.append((start, i, name))
        if kind in ("function", "scope") and self.at_scope_level():
            self.decl_start = i + 1

    def run(self) -> list[tuple[int, int, str]]:
        for i, c in enumerate(self.code):
            if c == "{":
                self.open_brace(i)
            elif c == "}":
                self.close_brace(i)
            elif c == ";" and self.at_scope_level():
                self.decl_start = i + 1
        return self.found


def cpp_functions(path: str, text: str) -> list[Function]:
    code, directives = blank_cpp(text)
    code = blank_other_branches(code, directives)
    lines = text.split("\n")
    result = []
    for start, end, name in _Scanner(code).run():
        first = code.count("\n", 0, start) + 1
        last = code.count("\n", 0, end) + 1
        reason = marker_reason(lines, first, ("//", "/*", "*"))
        result.append(Function(path, first, last - first + 1, name, reason))
    return result


# ---------------------------------------------------------------- Python


def python_functions(path: str, text: str) -> list[Function]:
    tree = ast.parse(text, filename=path)
    lines = text.split("\n")
    result = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            top = min([node.lineno] + [d.lineno for d in node.decorator_list])
            reason = marker_reason(lines, top, ("#",))
            length = node.end_lineno - node.lineno + 1
            result.append(Function(path, node.lineno, length, node.name, reason))
    return result


# ---------------------------------------------------------------- markers and files


def marker_reason(lines: list[str], first: int, comment_starts: tuple[str, ...]) -> str | None:
    """The reason of a long-function marker in the comment lines just above line `first`
    (1-based); "" for a marker without one, None when there is no marker."""
    k = first - 2
    while k >= 0 and lines[k].strip().startswith(comment_starts):
        m = MARKER.search(lines[k])
        if m:
            return m.group(1).strip().rstrip("*/").strip()
        k -= 1
    return None


def source_files(paths: list[str]) -> list[str]:
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
            continue
        if not os.path.isdir(p):
            raise FileNotFoundError(p)
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith(CPP_EXTS + (".py",))]
    return files


def functions_of(path: str, text: str) -> list[Function]:
    return python_functions(path, text) if path.endswith(".py") else cpp_functions(path, text)


def line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


# ---------------------------------------------------------------- main


def check_file(args: argparse.Namespace, path: str) -> tuple[int, int, int]:
    """Prints what in one file is over; returns (functions over, files over, functions read)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    file_over = line_count(text) > args.file_cap
    if file_over:
        print(f"{path}: {line_count(text)} lines, over the {args.file_cap}-line file cap")
    over = 0
    functions = functions_of(path, text)
    for fn in functions:
        if fn.length <= args.max_lines:
            continue
        where = f"{fn.path}:{fn.line}: {fn.name}: {fn.length} lines"
        if fn.reason:
            if args.all:
                print(f"{where} (long-function: {fn.reason})")
            continue
        over += 1
        why = "its long-function marker gives no reason" if fn.reason == "" else "no long-function marker"
        print(f"{where}, over {args.max_lines} ({why})")
    return over, int(file_over), len(functions)


def report(args: argparse.Namespace, files: list[str]) -> int:
    totals = [0, 0, 0]
    for path in files:
        totals = [a + b for a, b in zip(check_file(args, path), totals, strict=True)]
    bad_functions, bad_files, n_functions = totals
    print(
        f"function_length: {bad_functions} function(s) over {args.max_lines} lines without a reason, "
        f"{bad_files} file(s) over {args.file_cap} lines ({len(files)} files, {n_functions} functions read)",
        file=sys.stderr,
    )
    if bad_functions:
        print(
            "function_length: shorten each, or say why in a comment just above it: "
            "'// long-function: <reason>' ('# long-function: <reason>' in Python)",
            file=sys.stderr,
        )
    if bad_files:
        print("function_length: split each file over the cap into files with one job each", file=sys.stderr)
    return 1 if bad_functions or bad_files else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help=f"files or folders (default: {' '.join(DEFAULT_PATHS)})")
    ap.add_argument("--max-lines", type=int, default=120, help="longest function without a reason")
    ap.add_argument("--file-cap", type=int, default=600, help="longest file")
    ap.add_argument("--all", action="store_true", help="also list the long functions that give a reason")
    args = ap.parse_args(argv)
    if not args.paths:  # the default folders, from the repository root
        os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    try:
        files = source_files(args.paths or list(DEFAULT_PATHS))
    except FileNotFoundError as e:
        print(f"function_length: no such file or folder: {e}", file=sys.stderr)
        return 2
    return report(args, files)


if __name__ == "__main__":
    sys.exit(main())
