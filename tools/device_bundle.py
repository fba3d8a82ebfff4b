#!/usr/bin/env python3
"""What the GPU machine needs to run attnzoo's GPU checks, packed into one file that the device
tool's `run` can carry: build-device/bundle.tar.xz (the carried paths and the working tree may
hold 64 MiB in all).

That machine has the same torch wheel as ours (2.11.0+cu130, the pin), nvcc, CMake and ninja, but
none of the Debian packages attnzoo's libraries link. Its minutes are few and a build of the whole
project there would take most of them, so the bundle carries the binaries built here (build/,
which is built with ATTNZOO_CUDA=ON) rather than the means to build them:

  - build/bin's attnzoo, the test binaries that hold *_CUDA tests, bench_flash and
    bench_vit_cuda, build/lib's libraries, and build/share's zoo (links into the source folder);
  - build-device/mma/: kernels/ and layers/ and their tests built for plain sm_90, where the flash
    forward takes its mma.sync path (sm_90a takes wgmma); built here when absent or stale;
  - build-device/sysroot/lib: the Debian libraries those binaries load, found by walking their
    DT_NEEDED entries (the C and C++ runtimes, LibTorch's and CUDA's are that machine's own).
    OpenCV's imgcodecs links GDAL and GDCM, whose own closure is about 150 MB; attnzoo never asks
    OpenCV for either (no IMREAD_LOAD_GDAL, no DICOM input), so they are replaced by stub libraries
    with the same sonames that define the functions imgcodecs imports and abort, naming the
    function, if one is ever called (but GDALAllRegister, which OpenCV calls as it starts, and
    which does nothing there);
  - build-device/sysroot/{src/googletest,include/nlohmann}: for the kernels-only source build that
    device_check.sh falls back to when the binaries cannot load there;
  - build-device/sysroot/share/digits.png: vit_digits' training data source (make_digits.py);
  - build-device/manifest: torch's version, the source folder the binaries were built in (their
    compiled-in paths), the commit and the CUDA architectures.

Before packing, every carried binary is loaded with only the bundle's libraries first on the
search path (ldd: each library resolves into the bundle, the build trees, torch's or CUDA's
folders, or is a C/C++ runtime), and `attnzoo classify` runs on a digit, which loads imgcodecs
and its stubs for real.

    tools/device_bundle.py          # after tools/setup.sh; tools/device_check.sh --prepare
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICE_DIR = ROOT / "build-device"
LIMIT_BYTES = 64 * 1024 * 1024

BINARIES = ["attnzoo", "attnzoo_kernels_tests", "attnzoo_layers_tests", "attnzoo_models_tests",
            "bench_flash", "bench_vit_cuda"]
MMA_BINARIES = ["attnzoo_kernels_tests", "attnzoo_layers_tests"]
# The runtimes every Linux machine with a C++ compiler has (that machine's are newer): glibc's
# libraries, GCC's, zlib.
SYSTEM = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libutil.so.1",
          "libresolv.so.2", "ld-linux-x86-64.so.2", "linux-vdso.so.1", "libstdc++.so.6",
          "libgcc_s.so.1", "libgomp.so.1", "libz.so.1"}
# Libraries replaced by stubs (see the module's docstring), and the functions of theirs that
# are called whatever the input and do nothing in a stub: OpenCV registers GDAL's drivers when
# it sets up its decoders (so the GDAL decoder finds none, and is never asked for anyway).
STUBBED = {"libgdal.so.32", "libgdcmMSFF.so.3.0", "libgdcmDSED.so.3.0"}
NO_OPS = {"GDALAllRegister"}
# Folders whose libraries that machine has: torch's wheel, its nvidia-* wheels, the CUDA toolkit.
PROVIDED = re.compile(r"/torch/lib/|/nvidia/|/cuda[^/]*/")


def say(message: str) -> None:
    print(f"[device_bundle] {message}", flush=True)


def fail(message: str) -> None:
    print(f"device_bundle: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd, **kwargs) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


def needed(path: Path) -> list:
    out = run(["readelf", "-d", str(path)])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def runpath(path: Path) -> list:
    out = run(["readelf", "-d", str(path)])
    dirs = []
    for entry in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", out):
        dirs += [d.replace("$ORIGIN", str(path.parent)) for d in entry.split(":") if d]
    return dirs


def system_libraries() -> dict:
    """soname -> path, from the dynamic linker's cache (x86-64 entries)."""
    found = {}
    for line in run(["ldconfig", "-p"]).splitlines()[1:]:
        match = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if match and "x86-64" in match.group(2):
            found.setdefault(match.group(1), match.group(3))
    return found


def closure(roots: list, cache: dict) -> tuple:
    """The Debian libraries `roots` load: {soname: path}, and {stubbed soname: [its importers]}."""
    libraries, stubs, pending = {}, {}, [(r, n) for r in roots for n in needed(r)]
    searched = {r: runpath(r) for r in roots}
    while pending:
        importer, name = pending.pop()
        if name in SYSTEM:
            continue
        if name in STUBBED:
            stubs.setdefault(name, set()).add(importer)
            continue
        path = next((Path(d) / name for d in searched.get(importer, [])
                     if (Path(d) / name).exists()), None)
        if path is None and name in cache:
            path = Path(cache[name])
        if path is None:
            fail(f"{importer}: needs {name}, which is nowhere on this machine")
        real = path.resolve()
        if PROVIDED.search(str(real)) or str(real).startswith(str(ROOT)):
            continue
        if name in libraries:
            continue
        libraries[name] = real
        searched[real] = runpath(real)
        pending += [(real, n) for n in needed(real)]
    return libraries, stubs


def make_stub(name: str, importers: set, cache: dict, out: Path) -> int:
    """A library named `name` that defines each function `importers` take from the real one."""
    real = Path(cache[name]).resolve()
    defined = {}
    for line in run(["nm", "-D", "--defined-only", str(real)]).splitlines():
        parts = line.split()
        if len(parts) == 3:
            defined[parts[2]] = parts[1]
    wanted = set()
    for importer in importers:
        for line in run(["nm", "-D", "--undefined-only", str(importer)]).splitlines():
            symbol = line.split()[-1]
            if "@" in symbol and symbol.split("@")[0] in defined:
                fail(f"{importer}: imports the versioned {symbol} from {name}; a stub cannot")
            if symbol in defined:
                wanted.add(symbol)
    data = sorted(s for s in wanted if defined[s] not in "TWi")
    if data:
        fail(f"{name}: its importers take data, not only functions ({', '.join(data[:5])})")
    source = out.with_suffix(".c")
    lines = ["#include <stdio.h>", "#include <stdlib.h>",
             "static void called(const char* f) {",
             f'  fprintf(stderr, "attnzoo device bundle: {name} is a stub; %s was called\\n", f);',
             "  abort();", "}"]
    for i, symbol in enumerate(sorted(wanted)):
        body = "" if symbol in NO_OPS else f'called("{symbol}");'
        lines += [f'void stub_{i}(void) __asm__("{symbol}");', f"void stub_{i}(void) {{ {body} }}"]
    source.write_text("\n".join(lines) + "\n")
    run(["gcc", "-shared", "-fPIC", "-O2", f"-Wl,-soname,{name}", "-o", str(out), str(source)])
    source.unlink()
    return len(wanted)


def cmake_cache(tree: Path, key: str) -> str:
    for line in (tree / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return ""


def build_mma_tree(python: str) -> Path:
    """kernels/ and layers/ with their tests for plain sm_90 (no wgmma): the mma.sync path."""
    tree = DEVICE_DIR / "mma"
    prefix = run([python, "-c", "import torch.utils; print(torch.utils.cmake_prefix_path)"]).strip()
    say("building build-device/mma (kernels-only, sm_90: the mma.sync path)")
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tree), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}",
                    "-DATTNZOO_KERNELS_ONLY=ON", "-DATTNZOO_CUDA=ON",
                    "-DATTNZOO_CUDA_ARCHITECTURES=90-real"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(tree), "--target", *MMA_BINARIES], check=True)
    return tree


def tree_bytes() -> int:
    """The working tree as `run` copies it: tracked files and untracked files git does not ignore."""
    files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=ROOT).split("\0")
    return sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file())


def check_loads(elves: list, sysroot: Path, env: dict) -> None:
    """Every library each of `elves` loads resolves where it will on that machine."""
    allowed = (str(sysroot), str(ROOT / "build"), str(DEVICE_DIR / "mma"))
    for elf in elves:
        for line in run(["ldd", str(elf)], env=env).splitlines():
            if "not found" in line:
                fail(f"{elf}: {line.strip()}")
            match = re.match(r"\s*(\S+) => (\S+)", line)
            if not match or match.group(1) in SYSTEM:
                continue
            path = match.group(2)
            if not (path.startswith(allowed) or PROVIDED.search(path)):
                fail(f"{elf}: {match.group(1)} would come from {path}, not the bundle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the Python whose torch is linked")
    args = parser.parse_args()
    started = time.time()
    build = ROOT / "build"
    if not (build / "bin" / "attnzoo").exists():
        fail("build/ first (tools/setup.sh)")
    if not (build / "kernels" / "CMakeFiles" / "attnzoo_kernels_cuda.dir").is_dir():
        fail("build/ was configured without its CUDA kernels: the GPU checks need ATTNZOO_CUDA=ON")
    mma = DEVICE_DIR / "mma"
    newest = max(p.stat().st_mtime for p in (ROOT / "kernels").rglob("*") if p.is_file())
    if not all((mma / "bin" / b).exists() and (mma / "bin" / b).stat().st_mtime >= newest
               for b in MMA_BINARIES):
        build_mma_tree(args.python)

    stage = DEVICE_DIR / "bundle_stage"
    shutil.rmtree(stage, ignore_errors=True)
    sysroot = stage / "build-device" / "sysroot"
    (sysroot / "lib").mkdir(parents=True)
    carried = [build / "bin" / b for b in BINARIES]
    carried += [mma / "bin" / b for b in MMA_BINARIES]
    missing = [str(p) for p in carried if not p.exists()]
    if missing:
        fail(f"not built: {', '.join(missing)}")
    own = sorted((build / "lib").glob("*.so*")) + sorted((mma / "lib").glob("*.so*"))
    cache = system_libraries()
    libraries, stubs = closure(carried + [p for p in own if not p.is_symlink()], cache)
    for name, path in sorted(libraries.items()):
        shutil.copy2(path, sysroot / "lib" / name)
    for name, importers in sorted(stubs.items()):
        count = make_stub(name, importers, cache, sysroot / "lib" / name)
        say(f"{name}: a stub of the {count} functions {len(importers)} libraries import")
    say(f"{len(libraries)} Debian libraries, "
        f"{sum(p.stat().st_size for p in (sysroot / 'lib').iterdir()) / 2**20:.1f} MiB")

    shutil.copytree("/usr/src/googletest", sysroot / "src" / "googletest", symlinks=True,
                    ignore=shutil.ignore_patterns("docs", "*.md", "test", "samples"))
    shutil.copytree("/usr/include/nlohmann", sysroot / "include" / "nlohmann")
    (sysroot / "share").mkdir()
    shutil.copy2("/usr/share/doc/opencv-doc/examples/data/digits.png", sysroot / "share")
    torch_version = run([args.python, "-c", "import torch; print(torch.__version__)"]).strip()
    commit = run(["git", "describe", "--always", "--dirty"], cwd=ROOT).strip()
    (stage / "build-device" / "manifest").write_text(
        f"torch={torch_version}\nsource_root={cmake_cache(build, 'CMAKE_HOME_DIRECTORY')}\n"
        f"commit={commit}\narchitectures={cmake_cache(build, 'ATTNZOO_CUDA_ARCHITECTURES')}\n")

    env = dict(os.environ, LD_LIBRARY_PATH=f"{sysroot / 'lib'}:{build / 'lib'}:{mma / 'lib'}")
    check_loads(carried + own, sysroot, env)
    classify = subprocess.run(
        [str(build / "bin" / "attnzoo"), "classify", "--model", "configs/vit/vit_digits.yaml",
         "--weights", "assets/weights/vit_digits.safetensors", "--topk", "1",
         "assets/samples/digit_7.png"], cwd=ROOT, env=env, capture_output=True, text=True)
    top = re.search(r"^\s*([\d.]+%)\s+7\s+7$", classify.stdout, re.M)
    if classify.returncode != 0 or not top:
        fail(f"attnzoo classify on the bundle's libraries: rc {classify.returncode}\n"
             f"{classify.stdout}{classify.stderr}")
    say(f"{len(carried) + len(own)} binaries and libraries load from the bundle; attnzoo classify "
        f"says 7 ({top.group(1)}) for assets/samples/digit_7.png")

    out = DEVICE_DIR / "bundle.tar.xz"
    with tarfile.open(out, "w:xz", preset=9) as tar:
        tar.add(sysroot, arcname="build-device/sysroot")
        tar.add(stage / "build-device" / "manifest", arcname="build-device/manifest")
        for path in carried + own:
            tar.add(path, arcname=str(path.relative_to(ROOT)))
        # The build tree's zoo: links into the source folder, which device_check.sh links there.
        tar.add(build / "share", arcname="build/share")
    shutil.rmtree(stage)
    size, tree = out.stat().st_size, tree_bytes()
    say(f"build-device/bundle.tar.xz: {size / 2**20:.1f} MiB; with the working tree "
        f"({tree / 2**20:.1f} MiB) {(size + tree) / 2**20:.1f} MiB of the 64 carried "
        f"({time.time() - started:.0f} s)")
    if size + tree > LIMIT_BYTES:
        fail("over the 64 MiB that `run` carries")
    print("carry: build-device/bundle.tar.xz")


if __name__ == "__main__":
    main()
