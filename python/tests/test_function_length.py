"""scripts/function_length.py (the function-length check and the file cap of scripts/lint.sh) over
small synthetic sources written at run time: the 120-line limit at its edge, the long-function
marker and its reason, and braces the C++ scanner must not count (strings, characters, raw
strings, comments, the other branch of an #if)."""

import importlib.util
import os
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "function_length.py")
_spec = importlib.util.spec_from_file_location("function_length", SCRIPT)
fl = importlib.util.module_from_spec(_spec)
sys.modules["function_length"] = fl  # dataclasses look their module up there
_spec.loader.exec_module(fl)


def cpp_function(lines, name="f", above=(), body_line="  x += 1;"):
    """A C++ function exactly `lines` long (signature and closing brace included)."""
    return list(above) + [f"int {name}(int x) {{"] + [body_line] * (lines - 3) + ["  return x;", "}"]


def py_function(lines, name="f", above=()):
    return list(above) + [f"def {name}(x):"] + ["    x += 1"] * (lines - 2) + ["    return x"]


def run(tmp_path, name, lines, *args):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return fl.main([*args, str(path)])


def lengths(name, lines):
    return [(f.name, f.line, f.length) for f in fl.functions_of(name, "\n".join(lines) + "\n")]


@pytest.mark.parametrize("make,name", [(cpp_function, "a.cpp"), (py_function, "a.py")])
def test_the_limit_is_120_lines(tmp_path, capsys, make, name):
    assert run(tmp_path, name, make(120)) == 0
    assert run(tmp_path, name, make(121)) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / name}:1: f: 121 lines, over 120 (no long-function marker)" in out
    assert run(tmp_path, name, make(121), "--max-lines", "121") == 0


@pytest.mark.parametrize("make,name,comment", [(cpp_function, "a.cpp", "//"), (py_function, "a.py", "#")])
def test_a_marker_with_a_reason_lets_a_long_function_pass(tmp_path, capsys, make, name, comment):
    marked = make(300, above=[f"{comment} Deals the steps.", f"{comment} long-function: one pass, 9 shared locals"])
    assert run(tmp_path, name, marked) == 0
    assert run(tmp_path, name, marked, "--all") == 0
    assert "300 lines (long-function: one pass, 9 shared locals)" in capsys.readouterr().out
    # An empty reason is no reason.
    assert run(tmp_path, name, make(121, above=[f"{comment} long-function:   "])) == 1
    assert "its long-function marker gives no reason" in capsys.readouterr().out
    # Only the comment lines just above count: a marker separated by code or a blank line does not.
    assert run(tmp_path, name, make(121, above=[f"{comment} long-function: why", ""])) == 1
    assert run(tmp_path, name, [f"{comment} long-function: why"] + make(3, "g") + make(121)) == 1


def test_python_nested_functions_methods_and_decorators(tmp_path):
    src = ["class A:", "    # long-function: a reason", "    @staticmethod", "    @other"]
    src += ["    " + line for line in py_function(130, "m")]
    src += ["", "def outer():"] + ["    " + line for line in py_function(121, "inner")] + ["    return inner"]
    found = lengths("a.py", src)
    assert ("m", 5, 130) in found
    assert ("inner", 137, 121) in found
    assert ("outer", 136, 123) in found
    assert run(tmp_path, "a.py", src) == 1  # inner and outer; m gives its reason above its decorators


def test_cpp_braces_in_literals_and_comments_do_not_count(tmp_path):
    tricky = [
        '  const char* s = "}}} { \\" }";',
        "  char c = '}', d = '{', e = '\\'';",
        '  auto r = R"x(})" }{ )x";',
        "  // } a comment's brace",
        "  /* { */ int big = 1'000'000; /* } */",
        "  long big2 = 0x1'0000; char z = '}';",
        "#define CLOSE }",
    ]
    src = ["int f(int x) {"] + tricky * 17 + ["  return x;", "}"] + cpp_function(5, "g")
    assert lengths("a.cpp", src) == [("f", 1, 122), ("g", 123, 5)]
    assert run(tmp_path, "a.cpp", src) == 1
    assert run(tmp_path, "a.cpp", src, "--max-lines", "122") == 0


def test_cpp_scopes_classes_initializers_and_conditionals():
    src = [
        "namespace adaptiveload {",
        'extern "C" {',
        "int k[] = {1, 2};",
        "}",
        "namespace {",
        "enum class E { kA, kB };",
        "struct S : Base {",
        "  S(int a) : a_{a}, b_(a) {",
        "    a_ += 1;",
        "  }",
        "  explicit S(long b) : a_(1), b_{int(b)} {}",
        " public:",
        "  template <typename T>",
        "  T get() const noexcept {",
        "    return T{a_};",
        "  }",
        "  int a_{0}, b_;",
        "};",
        "}  // namespace",
        "#if AL_CUDA",
        "void launch(int n) {",
        "#else",
        "void launch(long n) {",
        "#endif",
        "  auto h = [&](int i) { return i + n; };",
        "  h(1);",
        "}",
        "auto Planner::run(const Plan& p) const -> std::vector<int> {",
        "  return {};",
        "}",
        "__global__ void __launch_bounds__(256, (2)) kernel(int n) {",
        "}",
        "}  // namespace adaptiveload",
    ]
    assert lengths("a.cpp", src) == [
        ("S", 8, 3),
        ("S", 11, 1),
        ("get", 13, 4),
        ("launch", 21, 7),
        ("Planner::run", 28, 3),
        ("kernel", 31, 2),
    ]


def test_the_file_cap(tmp_path, capsys):
    assert run(tmp_path, "a.py", ["x = 1"] * 600) == 0
    assert run(tmp_path, "a.py", ["x = 1"] * 601) == 1
    assert f"{tmp_path / 'a.py'}: 601 lines, over the 600-line file cap" in capsys.readouterr().out


def test_folders_are_walked_and_a_missing_path_is_named(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.cu").write_text("\n".join(cpp_function(121)) + "\n")
    (tmp_path / "notes.txt").write_text("{\n" * 1000)
    assert fl.main([str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"{tmp_path / 'sub' / 'long.cu'}:1: f: 121 lines" in captured.out
    assert "1 function(s) over 120 lines without a reason, 0 file(s) over 600 lines (1 files" in captured.err
    assert fl.main([str(tmp_path / "nowhere")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
