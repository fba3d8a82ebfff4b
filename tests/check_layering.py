#!/usr/bin/env python3
"""The CMake graph of attnzoo's libraries against their #include graph.

check_layering.py SOURCE_DIR GRAPH_JSON

GRAPH_JSON (written by tests/CMakeLists.txt at configure time) holds each library's folder, its
public and private link dependencies and its installed headers. For every library folder this
checks that:
  1. each attnzoo folder its files include is its own or one it links, directly or through the
     libraries it links (an include without the link builds here by luck and fails elsewhere);
  2. each attnzoo folder an installed header includes is reached through PUBLIC links (a
     consumer of the installed header needs it too);
  3. each attnzoo library it links directly is included by one of its files (a link nothing
     uses is a dependency in the graph that the code does not have);
  4. the third-party libraries it includes are linked, the same way.
Prints one line per violation and exits 1 if there is any.
"""
import json
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
SOURCE_EXTENSIONS = (".h", ".cpp", ".cu", ".cuh")
# Third-party headers by their include prefix, and the link targets that provide them.
THIRD_PARTY = [
    ("torch/headeronly/", {"attnzoo::torch", "attnzoo::c10"}),
    ("torch/", {"attnzoo::torch"}),
    ("ATen/", {"attnzoo::torch"}),
    ("c10/", {"attnzoo::torch", "attnzoo::c10"}),
    ("opencv2/", {"attnzoo::opencv"}),
    ("yaml-cpp/", {"yaml-cpp"}),
    ("sndfile.h", {"attnzoo::sndfile"}),
    ("soxr.h", {"attnzoo::soxr"}),
    ("nlohmann/", {"nlohmann_json::nlohmann_json"}),
    ("boost/", {"Boost::headers"}),
    ("zlib.h", {"ZLIB::ZLIB"}),
]


def strip_genex(item):
    """attnzoo::x from $<BUILD_INTERFACE:attnzoo::x>, $<LINK_ONLY:attnzoo::x>, ..."""
    while True:
        m = re.fullmatch(r"\$<[A-Z_]+:(.*)>", item)
        if not m:
            return item
        item = m.group(1)


def includes_of(folder_path, recursive):
    """{file: [included paths]} for the sources of a folder (its subfolders too if `recursive`)."""
    result = {}
    for root, dirs, files in os.walk(folder_path):
        if not recursive:
            dirs[:] = []
        for name in files:
            if name.endswith(SOURCE_EXTENSIONS):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    result[path] = INCLUDE.findall(f.read())
    return result


def main():
    source_dir, graph_path = sys.argv[1], sys.argv[2]
    with open(graph_path) as f:
        graph = json.load(f)
    libraries = {
        name: {
            "folder": lib["folder"],
            "public": {strip_genex(d) for d in lib["public"] if d},
            "private": {strip_genex(d) for d in lib["private"] if d},
            "headers": set(lib["headers"]),
        }
        for name, lib in graph.items()
    }
    alias = {"attnzoo::" + name.removeprefix("attnzoo_"): name for name in libraries}
    folder_of = {name: lib["folder"] for name, lib in libraries.items()}

    def closure(name, public_only):
        """Every link target reached from library `name` (through PUBLIC links alone, or all of
        its own links and then the PUBLIC links of what they reach)."""
        seen, stack = set(), []
        lib = libraries[name]
        stack.extend(lib["public"] | (set() if public_only else lib["private"]))
        while stack:
            dep = stack.pop()
            if dep in seen:
                continue
            seen.add(dep)
            if dep in alias:
                stack.extend(libraries[alias[dep]]["public"])
        return seen

    def folder_needed(include):
        """The attnzoo folder an include names, or None."""
        if not include.startswith("attnzoo/"):
            return None
        parts = include.split("/")
        for name, folder in folder_of.items():
            if "/".join(parts[1 : 1 + folder.count("/") + 1]) == folder:
                return name
        return "?" + parts[1]

    problems = []
    for name, lib in sorted(libraries.items()):
        folder = lib["folder"]
        own_subfolders = [f for n, f in folder_of.items() if f.startswith(folder + "/")]
        files = includes_of(os.path.join(source_dir, folder), recursive=True)
        files = {
            p: inc
            for p, inc in files.items()
            if not any(os.path.relpath(p, source_dir).startswith(s + "/") for s in own_subfolders)
        }
        reach_all = closure(name, public_only=False)
        reach_public = closure(name, public_only=True)
        used_directly = set()
        for path, includes in sorted(files.items()):
            relative = os.path.relpath(path, source_dir)
            installed = os.path.basename(path) in lib["headers"] and path.endswith((".h", ".cuh"))
            for include in includes:
                needed = folder_needed(include)
                if needed is not None:
                    if needed == name:
                        continue
                    if needed.startswith("?"):
                        problems.append(f"{relative}: includes <{include}>, of no library")
                        continue
                    target = "attnzoo::" + needed.removeprefix("attnzoo_")
                    used_directly.add(target)
                    if target not in reach_all:
                        problems.append(f"{relative}: includes <{include}> but {name} does not "
                                        f"link {target}")
                    elif installed and target not in reach_public:
                        problems.append(f"{relative}: an installed header includes <{include}> "
                                        f"but {name} links {target} privately")
                    continue
                for prefix, targets in THIRD_PARTY:
                    if include.startswith(prefix):
                        used_directly |= targets
                        if not targets & reach_all:
                            problems.append(f"{relative}: includes <{include}> but {name} links "
                                            f"none of {', '.join(sorted(targets))}")
                        elif installed and not targets & reach_public:
                            problems.append(f"{relative}: an installed header includes "
                                            f"<{include}> but {name} links "
                                            f"{', '.join(sorted(targets))} privately")
                        break
        for dep in sorted((lib["public"] | lib["private"]) & set(alias)):
            if dep not in used_directly:
                problems.append(f"{folder}/: {name} links {dep}, which none of its files "
                                "includes")
    for line in problems:
        print(line)
    print(f"{len(libraries)} libraries checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
