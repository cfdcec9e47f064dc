#!/usr/bin/env python3
"""Holds the program's sources (core/, app/, ui/) to the sizes docs/architecture.md sets:

1. no file over 600 lines;
2. no function over 80 lines, except a data table: a function whose body is one list of values
   (migrations, a field table), marked by "data table" in the comment just above it.

Tests and benchmarks are exempt. A function is found as clang-format lays one out: a line at
namespace level (indented at most two spaces, for a nested namespace's or a class's inline
members) that holds a parameter list and ends with "{", up to the line that closes it at the
same indent. Lambdas and blocks inside a function count towards it.

  check_sizes.py ROOT      exit 1 listing every file or function over its limit
  check_sizes.py --self-test   breaks each rule once in a scratch tree and expects each found
"""
import os
import re
import sys
import tempfile

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
DIRECTORIES = ("core", "app", "ui")
NOT_A_FUNCTION = re.compile(r"(namespace|struct|class|enum|union|extern)\b")


def is_data_table(lines, head):
    """Whether the comment lines just above line `head` say "data table"."""
    i = head - 1
    while i >= 0 and lines[i].lstrip().startswith("//"):
        if "data table" in lines[i]:
            return True
        i -= 1
    return False


START = re.compile(r"^( {0,2})(\S.*\(.*)$")


def head_end(lines, i):
    """The line that ends a function's head starting at line `i` (a parameter list or an
    initializer list may wrap over several lines), or None when it is a declaration."""
    for j in range(i, min(i + 30, len(lines))):
        code = re.sub(r"\s*//.*$", "", lines[j]).rstrip()
        if code.endswith((";", "}")):  # a declaration, or a body on one line
            return None
        if code.endswith("{"):
            return j
    return None


def long_functions(lines):
    found = []
    i = 0
    while i < len(lines):
        match = START.match(lines[i])
        text = match.group(2) if match else ""
        last = head_end(lines, i) if match and not NOT_A_FUNCTION.match(text) else None
        if last is not None and "= {" not in lines[last] and not text.startswith(("//", "#")):
            close = re.compile("^" + match.group(1) + r"\}")
            end = last + 1
            while end < len(lines) and not close.match(lines[end]):
                end += 1
            length = end - i + 1
            if length > MAX_FUNCTION_LINES and not is_data_table(lines, i):
                found.append((i + 1, length, text.strip()))
            i = end
        i += 1
    return found


def check(root):
    problems = []
    for directory in DIRECTORIES:
        for folder, _, names in os.walk(os.path.join(root, directory)):
            for name in sorted(names):
                if not name.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(folder, name)
                shown = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as text:
                    lines = text.read().split("\n")
                if lines and lines[-1] == "":
                    lines.pop()
                if len(lines) > MAX_FILE_LINES:
                    problems.append(f"{shown}: {len(lines)} lines, more than {MAX_FILE_LINES}: "
                                    "split it by job")
                for line, length, head in long_functions(lines):
                    problems.append(f"{shown}:{line}: {head} … is {length} lines, more than "
                                    f"{MAX_FUNCTION_LINES}: split it into named steps")
    return problems


def self_test():
    body = "\n".join(f"  step({i});" for i in range(MAX_FUNCTION_LINES))
    files = {
        "core/long.cpp": f"namespace x {{\n\nvoid too_long(int a) {{\n{body}\n}}\n\n}}  // namespace x\n",
        "core/table.cpp": (f"// Every field (a data table).\nconst int* table() {{\n{body}\n}}\n"),
        "ui/big.h": "\n".join("// filler" for _ in range(MAX_FILE_LINES + 1)) + "\n",
        "ui/fine.cpp": "void short_one() {\n  return;\n}\n",
        "ui/wrapped.cpp": (f"Panel::Panel(QWidget* parent)\n    : QWidget(parent),\n"
                           f"      field_(new QLineEdit) {{\n{body}\n}}\n"),
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(root, name), "w", encoding="utf-8") as out:
                out.write(text)
        problems = check(root)
    expected = ["core/long.cpp:3: void too_long(int a)", "ui/big.h: 601 lines",
                "ui/wrapped.cpp:1: Panel::Panel(QWidget* parent)"]
    missed = [e for e in expected if not any(p.startswith(e) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(e) for e in expected)]
    if missed or extra:
        print("check_sizes self-test: missed", missed, "unexpected", extra)
        return 1
    print("check_sizes self-test: each limit caught (a wrapped head too), the data table and the "
          "short file left alone")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print("usage: check_sizes.py ROOT | --self-test", file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
