#!/usr/bin/env python3
"""Checks the layering that docs/architecture.md draws, from the sources themselves.

1. Module order: a file in core/M may include headers of M and of modules below M, never of a
   module above it, nor of ui/ or app/, and may not declare into a higher module's namespace
   (`namespace plan { struct X; }`). Every folder under core/ must have a place in the order and
   every name in the order must be a folder: a module added without a place fails.
2. ui/ includes core and its own headers, never app/; app/cli includes core and its own.
3. The source lists that skip LibTorch's precompiled header (*_PLAIN_SOURCES in a CMakeLists.txt)
   hold only files that include nothing of LibTorch, directly or through a project header, and
   the *_TORCH_SOURCES lists only files that do: a wrong entry costs build time, not correctness,
   so nothing else would notice it. A target with that header takes its sources from the two
   lists alone.

Usage: check_module_order.py [SOURCE_ROOT]       (exit 1 and one line per violation)
       check_module_order.py --self-test         (shows that each rule catches its violation)
"""

import os
import re
import shutil
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
NAMESPACE = re.compile(r"^\s*namespace\s+(?:rematlab::)?(\w+)\s*\{")
TORCH_PREFIXES = ("torch/", "ATen/", "c10/", "caffe2/")
ORDER_HEADING = "## Module order"


def read_order(root):
    """The core modules, lowest first, from the fenced block under ORDER_HEADING. It draws them
    highest first, a module per line from the first column (its name, then what it holds);
    indented lines continue the description."""
    path = os.path.join(root, "docs", "architecture.md")
    with open(path, encoding="utf-8") as doc:
        lines = doc.read().split("\n")
    try:
        start = lines.index(ORDER_HEADING)
        fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
        end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    except (ValueError, StopIteration):
        sys.exit(f"{path}: no fenced block under '{ORDER_HEADING}'")
    drawn = [line.split()[0] for line in lines[fence + 1:end] if line[:1].strip()]
    twice = sorted({name for name in drawn if drawn.count(name) > 1})
    if twice:
        sys.exit(f"{path}: named twice in the module order: {', '.join(twice)}")
    return list(reversed(drawn))


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as source:
        for number, line in enumerate(source, 1):
            match = INCLUDE.match(line)
            if match:
                yield number, match.group(1) == "<", match.group(2)


def source_files(folder):
    for directory, _, names in sorted(os.walk(folder)):
        for name in sorted(names):
            if name.endswith((".h", ".cpp")):
                yield os.path.join(directory, name)


def check_layers(root, order):
    core = os.path.join(root, "core")
    problems = []
    folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))
    for folder in folders:
        if folder not in order:
            problems.append(f"core/{folder}: a module without a place in the order "
                            f"(docs/architecture.md, '{ORDER_HEADING}')")
    for name in order:
        if name not in folders:
            problems.append(f"docs/architecture.md: '{name}' is in the module order but core/{name}"
                            " does not exist")
    rank = {name: i for i, name in enumerate(order)}

    def core_module(header):
        first = header.split("/")[0]
        return first if "/" in header and first in rank else None

    for path in source_files(core):
        here = os.path.relpath(path, core).split(os.sep)[0]
        if here not in rank:
            continue
        for number, system, header in includes(path):
            target = core_module(header)
            if system and target is None:
                continue
            where = f"{os.path.relpath(path, root)}:{number}"
            if target is None:
                if "/" in header or not os.path.exists(os.path.join(os.path.dirname(path), header)):
                    problems.append(f"{where}: includes \"{header}\", which is not in core")
            elif rank[target] > rank[here]:
                problems.append(f"{where}: {here} includes \"{header}\" from {target}, a module "
                                "above it")
        # A declaration names a module as surely as an include: `namespace plan { struct X; }`.
        with open(path, encoding="utf-8", errors="replace") as source:
            for number, line in enumerate(source, 1):
                match = NAMESPACE.match(line)
                if match and match.group(1) in rank and rank[match.group(1)] > rank[here]:
                    problems.append(f"{os.path.relpath(path, root)}:{number}: {here} declares "
                                    f"into namespace {match.group(1)}, a module above it")
    for layer, own in (("ui", None), ("app/cli", "cli")):
        for path in source_files(os.path.join(root, layer)):
            for number, system, header in includes(path):
                first = header.split("/")[0]
                if "/" not in header or (system and first not in ("cli", "ui", "app")):
                    continue
                if first not in rank and first != own and first != "layering":
                    problems.append(f"{os.path.relpath(path, root)}:{number}: {layer} includes "
                                    f"\"{header}\", which is neither core nor its own")
    return problems


def reaches_torch(path, roots, seen):
    """Whether `path` includes LibTorch, directly or through a project header."""
    if path in seen:
        return False
    seen.add(path)
    for _, system, header in includes(path):
        if header.startswith(TORCH_PREFIXES):
            return True
        for base in ([] if system else [os.path.dirname(path)]) + roots:
            candidate = os.path.normpath(os.path.join(base, header))
            if os.path.isfile(candidate):
                if reaches_torch(candidate, roots, seen):
                    return True
                break
    return False


def check_source_lists(root):
    problems = []
    roots = [os.path.join(root, d) for d in ("core", "app", "ui", "tests")]
    listing = re.compile(r"\bset\((\w+)_(PLAIN|TORCH)_SOURCES\b(.*?)\)", re.S)
    precompiled = re.compile(r"\btarget_precompile_headers\((\S+)")
    for directory in ("core", "app", "tests", "bench", "ui"):
        cmake = os.path.join(root, directory, "CMakeLists.txt")
        if not os.path.isfile(cmake):
            continue
        with open(cmake, encoding="utf-8") as text:
            content = re.sub(r"#[^\n]*", "", text.read())
        lists = set()
        for match in listing.finditer(content):
            kind = match.group(2)
            lists.add(f"{match.group(1)}_{kind}_SOURCES")
            for entry in match.group(3).split():
                source = os.path.join(root, directory, entry)
                name = os.path.relpath(source, root)
                if not os.path.isfile(source):
                    problems.append(f"{directory}/CMakeLists.txt: {name} is listed but missing")
                    continue
                torch = reaches_torch(source, roots, set())
                if kind == "PLAIN" and torch:
                    problems.append(f"{name} includes LibTorch but is in {match.group(1)}_PLAIN_"
                                    "SOURCES: it would parse LibTorch's headers without the "
                                    "precompiled header")
                if kind == "TORCH" and not torch:
                    problems.append(f"{name} includes nothing of LibTorch but is in "
                                    f"{match.group(1)}_TORCH_SOURCES: move it to the plain list")
        # A target with LibTorch's precompiled header takes its sources from the two lists
        # alone, so that none escapes the check above.
        for match in precompiled.finditer(content):
            target = match.group(1)
            made = re.search(r"\badd_(?:library|executable)\(" + re.escape(target) + r"\s(.*?)\)",
                             content, re.S)
            given = [] if made is None else [word for word in made.group(1).split()
                                             if word not in ("STATIC", "SHARED", "OBJECT")]
            listed = (len(given) == 2 and all(re.fullmatch(r"\$\{\w+_SOURCES\}", w) for w in given)
                      and {w[2:-1] for w in given} <= lists)
            if not listed:
                problems.append(f"{directory}/CMakeLists.txt: {target} has LibTorch's precompiled "
                                "header but its sources are not exactly a *_PLAIN_SOURCES and a "
                                "*_TORCH_SOURCES list")
    return problems


def check(root):
    return check_layers(root, read_order(root)) + check_source_lists(root)


def self_test():
    """Builds small trees that break each rule once and expects exactly that to be reported."""
    def tree(files):
        root = tempfile.mkdtemp(prefix="module-order-")
        for name, text in files.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
        return root

    doc = (f"# A\n\n{ORDER_HEADING}\n\n```\nhigh   uses low\nlow    the leaf,\n"
           "       an indented line: more of its description\n```\n")
    sound = {"docs/architecture.md": doc,
             "core/low/a.h": "#pragma once\n#include <torch/torch.h>\n",
             "core/low/b.h": "#pragma once\n",
             "core/high/c.h": '#include "low/a.h"\n#include "c_detail.h"\n',
             "core/high/c_detail.h": "#pragma once\n",
             "core/CMakeLists.txt": "set(CORE_PLAIN_SOURCES\n  high/d.cpp\n)\n"
                                    "set(CORE_TORCH_SOURCES\n  high/e.cpp\n)\n"
                                    "add_library(core STATIC ${CORE_PLAIN_SOURCES} "
                                    "${CORE_TORCH_SOURCES})\n"
                                    "target_precompile_headers(core PRIVATE <torch/torch.h>)\n",
             "core/high/d.cpp": '#include "low/b.h"\n',
             "core/high/e.cpp": '#include "high/c.h"\n',
             "ui/w.cpp": '#include "high/c.h"\n#include "w.h"\n',
             "app/cli/m.cpp": '#include "cli/x.h"\n#include "low/b.h"\n'}
    broken = [
        ({"core/low/b.h": '#pragma once\n#include "high/c_detail.h"\n'}, "a module above it"),
        ({"core/extra/f.h": "#pragma once\n"}, "without a place in the order"),
        ({"core/low/b.h": '#include "cli/x.h"\n'}, "not in core"),
        ({"ui/w.cpp": '#include "cli/x.h"\n'}, "neither core nor its own"),
        ({"core/high/d.cpp": '#include "low/a.h"\n'}, "includes LibTorch but is in"),
        ({"core/high/e.cpp": '#include "low/b.h"\n'}, "includes nothing of LibTorch"),
        ({"core/high/d.cpp": "#include <low/a.h>\n"}, "includes LibTorch but is in"),
        ({"core/low/b.h": "#pragma once\n#include <high/c_detail.h>\n"}, "a module above it"),
        ({"core/low/b.h": "#pragma once\nnamespace rematlab::high {\nstruct X;\n}\n"},
         "declares into namespace high"),
        ({"core/CMakeLists.txt": sound["core/CMakeLists.txt"].replace(
            "set(CORE_PLAIN_SOURCES\n", "set(CORE_PLAIN_SOURCES  # a comment\n").replace(
            "high/d.cpp", "high/e.cpp\n  high/d.cpp", 1)}, "includes LibTorch but is in"),
        ({"core/CMakeLists.txt": sound["core/CMakeLists.txt"].replace(
            "${CORE_TORCH_SOURCES})", "${CORE_TORCH_SOURCES} high/f.cpp)")},
         "are not exactly"),
        ({"docs/architecture.md": doc.replace("low ", "gone   a name without a folder\nlow ")},
         "does not exist"),
    ]
    failures = []
    root = tree(sound)
    try:
        if check(root):
            failures.append(f"a sound tree was refused: {check(root)}")
    finally:
        shutil.rmtree(root)
    for change, expected in broken:
        root = tree({**sound, **change})
        try:
            found = check(root)
            if len(found) != 1 or expected not in found[0]:
                failures.append(f"{sorted(change)}: expected one problem with '{expected}', "
                                f"got {found}")
        finally:
            shutil.rmtree(root)
    for failure in failures:
        print(failure)
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check(os.path.abspath(root))
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
