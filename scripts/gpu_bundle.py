#!/usr/bin/env python
"""An offline install bundle of the pinned GPU stack (deploy/gpu_pins.txt) plus this package, for a GPU node
without internet (docs/gpu.md, "A GPU node without internet").

On a machine with internet (any OS; the wheels are chosen for the target, not for this machine):

    python scripts/gpu_bundle.py build BUNDLE          # --python-version 3.12 --platform manylinux_2_31_x86_64

first checks, by deploy/gpu_wheels.json (each pin's files on the index), that every pin has a wheel for that
Python and platform (``manylinux_2_31``: glibc 2.31 or newer, the oldest llguidance 1.7.6 has a wheel for),
then downloads each as a binary wheel (``pip download --no-deps --only-binary=:all: --python-version 3.12
--implementation cp --platform <each manylinux tag that glibc runs>``), builds a wheel of
antlr4-python3-runtime (published as a source archive only; pure Python) and of this checkout, copies the pins
and writes ``BUNDLE/manifest.json`` (each wheel's name, version, tags, size and sha256; the Python and platform
it was built for; the newest glibc a wheel needs), then checks it. Copy BUNDLE to the node; there, with the
base the pins ran on (Python 3.12, torch 2.11.0+cu130 and what ``install`` lists as declared but absent):

    python scripts/gpu_bundle.py install BUNDLE --target SITE   # then PYTHONPATH=SITE (and PATH=SITE/bin)

checks the bundle, prints what its wheels declare that this Python lacks, runs ``pip install --no-index
--no-deps --find-links BUNDLE --target SITE`` (without ``--target``: into this Python's site-packages), then
the smoke check (``smoke SITE``: imports the stack and loads every ``verl.plugins`` entry point, timed).
``--no-deps``: the pins are the set the recipe ran with, not pip's closure of every declared dependency
(verl declares accelerate, peft, wandb, tensorboard and pybind11, which the runs did without).
``check BUNDLE`` checks a bundle anywhere: every pin has exactly its wheel, the project's wheel is there,
nothing else is, every file matches its size and sha256, and every wheel's tags fit the bundle's Python and
platform. Each problem names the file or pin. ``wheels`` rewrites deploy/gpu_wheels.json from the index pip
uses (after a pin changes); ``wheels --check`` only compares (both need the network; the tests read the file).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from email.parser import BytesParser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename,
                             parse_wheel_filename)
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "deploy" / "gpu_pins.txt"
WHEELS = ROOT / "deploy" / "gpu_wheels.json"  # each pin's files on the index (``wheels`` refreshes it)
PLATFORM = "manylinux_2_31_x86_64"  # the oldest glibc every pin has a wheel for (llguidance 1.7.6: 2.31)
PROJECT = "ibpo-verl"
SOURCE_ONLY = {"antlr4-python3-runtime"}  # no wheel on the index: built here (pure Python, py3-none-any)
MANIFEST = "manifest.json"
# what the smoke check imports, in this order: the stack, then the module verl's vLLM server process runs
STACK = ("torch", "transformers", "ray", "verl", "vllm", "verl.workers.rollout.vllm_rollout.vllm_async_server")
PIN_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def read_pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a ``name==version`` file (``#`` comments and blank lines skipped)."""
    pins: dict[str, str] = {}
    for line_no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN_LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{line_no}: {line!r} is not name==version")
        name = canonicalize_name(match.group(1))
        if name in pins:
            raise ValueError(f"{path}:{line_no}: {name} pinned twice")
        pins[name] = match.group(2)
    return pins


def platform_tags(platform: str) -> list[str]:
    """Every platform tag a node of ``platform`` (``manylinux_2_X_<arch>``: glibc 2.X) installs, newest first,
    legacy aliases included; ``any`` is implied by pip."""
    match = MANYLINUX.match(platform)
    if match is None:
        raise ValueError(f"--platform {platform!r}: expected manylinux_2_<glibc minor>_<arch>, e.g. "
                         "manylinux_2_28_x86_64")
    major, minor, arch = int(match.group(1)), int(match.group(2)), match.group(3)
    if major != 2 or minor < 5:
        raise ValueError(f"--platform {platform!r}: glibc 2.5 or newer")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 4, -1)]
    return tags + [f"{alias}_{arch}" for alias, (_, m) in sorted(LEGACY_MANYLINUX.items(), key=lambda kv: -kv[1][1])
                   if m <= minor]


def target_tags(python_version: str, platform: str) -> frozenset[Tag]:
    """Every wheel tag a CPython of ``python_version`` (``3.12``) installs on ``platform`` (packaging.tags: cp312,
    abi3 of earlier CPythons, py3x, ``none``, ``any``), as pip ranks them for that target."""
    version = tuple(int(x) for x in python_version.split("."))
    interpreter, platforms = f"cp{version[0]}{version[1]}", platform_tags(platform)
    return frozenset([*cpython_tags(version, abis=[interpreter], platforms=platforms),
                      *compatible_tags(version, interpreter, platforms=platforms)])


def wheel_problem(filename: str, python_version: str, platform: str) -> str | None:
    """Why a wheel does not install on the bundle's Python and platform, or None."""
    tags = parse_wheel_filename(filename)[3]
    if tags & target_tags(python_version, platform):
        return None
    return f"{filename}: tags {sorted(str(t) for t in tags)} do not fit Python {python_version} on {platform}"


def file_version(filename: str) -> Version | None:
    """The version a wheel's or an sdist's name carries; None for other files and for names that are not
    valid (old uploads such as ``email_validator-0.1.0-rc1.tar.gz``)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1] if filename.endswith((".tar.gz", ".zip")) else None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def pin_files(document: dict, version: str) -> list[str]:
    """The files of ``version`` in a PEP 691 project page (the index's JSON), not yanked: its sdist and its
    wheels for ``any`` or a manylinux platform (what a Linux GPU node can install), sorted."""
    files = []
    for entry in document["files"]:
        name = entry["filename"]
        if entry.get("yanked") or file_version(name) != Version(version):
            continue
        if name.endswith(".whl") and not any(t.platform == "any" or t.platform.startswith("manylinux")
                                             for t in parse_wheel_filename(name)[3]):
            continue
        files.append(name)
    return sorted(files)


def fetch_record(pins: dict[str, str], index: str) -> dict[str, list[str]]:
    """``{pin: its files}`` from the index's JSON API (PEP 691), the way pip reads it."""
    def fetch(name: str) -> list[str]:
        request = urllib.request.Request(f"{index.rstrip('/')}/{name}/",
                                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return pin_files(json.load(response), pins[name])
    with ThreadPoolExecutor(8) as pool:
        return dict(zip(sorted(pins), pool.map(fetch, sorted(pins))))


def record_text(record: dict[str, list[str]]) -> str:
    """deploy/gpu_wheels.json's text: one line per pin, so that a refresh's diff reads pin by pin."""
    return "{\n" + ",\n".join(f" {json.dumps(n)}: {json.dumps(f)}" for n, f in sorted(record.items())) + "\n}\n"


def missing_wheels(record: dict[str, list[str]], pins: dict[str, str], python_version: str,
                   platform: str) -> list[str]:
    """Every pin without a wheel that installs on the target, by the record of the index (the source-only
    pins, built here, excepted); each names the pin and the platforms its wheels are for."""
    problems, target = [], target_tags(python_version, platform)
    python = {(t.interpreter, t.abi) for t in target}
    for name, version in sorted(pins.items()):
        files = record.get(name)
        versions = {str(file_version(f)) for f in files or []}
        if files is None or versions != {version}:
            problems.append(f"{name}=={version}: {WHEELS.name} has {sorted(versions) or 'no files'} "
                            "(python scripts/gpu_bundle.py wheels refreshes it)")
        elif name not in SOURCE_ONLY and not any(parse_wheel_filename(f)[3] & target
                                                  for f in files if f.endswith(".whl")):
            platforms = sorted({t.platform for f in files if f.endswith(".whl") for t in parse_wheel_filename(f)[3]
                                if (t.interpreter, t.abi) in python})
            problems.append(f"{name}=={version}: no wheel for Python {python_version} on {platform} (its wheels "
                            f"for Python {python_version} are for {', '.join(platforms) or 'no platform'})")
    return problems


def declared_from_base(bundle: Path, python_version: str, platform: str) -> dict[str, list[tuple[Requirement, str]]]:
    """Each requirement the bundle's wheels declare, with the extras that other wheels of the bundle ask of them
    (``fastapi[standard]``), markers evaluated for the target, on a distribution that no wheel of the bundle
    provides: the base's share of the stack, ``{name: [(requirement, declaring wheel's name)]}``."""
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0", "os_name": "posix",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": MANYLINUX.match(platform).group(3),
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    metadata = {}
    for path in sorted(bundle.glob("*.whl")):
        with zipfile.ZipFile(path) as wheel:
            meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            lines = BytesParser().parsebytes(wheel.read(meta), headersonly=True).get_all("Requires-Dist") or []
        metadata[canonicalize_name(parse_wheel_filename(path.name)[0])] = [Requirement(line) for line in lines]
    declared, todo, seen = {}, [(name, "") for name in metadata], set()
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        for requirement in metadata[name]:
            marker = requirement.marker
            if marker is not None and not marker.evaluate({**env, "extra": extra}) or \
                    extra and (marker is None or marker.evaluate({**env, "extra": ""})):  # taken without the extra
                continue
            wanted = canonicalize_name(requirement.name)
            if wanted in metadata:
                todo += [(wanted, e) for e in requirement.extras]
            else:
                declared.setdefault(wanted, []).append((requirement, str(name)))
    return declared


def base_gaps(declared: dict[str, list[tuple[Requirement, str]]], installed: Callable[[str], str | None]) -> list[str]:
    """Which of ``declared`` the base lacks or has at a version outside a declared range; ``installed(name)``
    gives a distribution's version or None."""
    gaps = []
    for name, requirements in sorted(declared.items()):
        have = installed(name)
        if have is None:
            gaps.append(f"{name}: not installed (declared by {', '.join(sorted({w for _, w in requirements}))})")
            continue
        outside = [f"{r.specifier} ({w})" for r, w in requirements if not r.specifier.contains(have, prereleases=True)]
        if outside:
            gaps.append(f"{name} {have}: outside {'; '.join(outside)}")
    return gaps


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def needed_glibc(filenames: list[str]) -> str:
    """The newest glibc any wheel's platform tag asks for (``2.17``), or ``none`` for pure wheels only."""
    newest = None
    for filename in filenames:
        for tag in parse_wheel_filename(filename)[3]:
            match = MANYLINUX.match(tag.platform)
            version = ((int(match.group(1)), int(match.group(2))) if match else
                       next((v for alias, v in LEGACY_MANYLINUX.items() if tag.platform.startswith(alias + "_")), None))
            if version is not None and (newest is None or version > newest):
                newest = version
    return "none" if newest is None else f"{newest[0]}.{newest[1]}"


def write_manifest(bundle: Path, python_version: str, platform: str) -> dict:
    """``bundle/manifest.json`` of the wheels in ``bundle``."""
    wheels = []
    for path in sorted(bundle.glob("*.whl")):
        name, version, _, tags = parse_wheel_filename(path.name)
        wheels.append({"file": path.name, "name": str(name), "version": str(version),
                       "tags": sorted(str(t) for t in tags), "bytes": path.stat().st_size, "sha256": sha256(path)})
    manifest = {"python_version": python_version, "platform": platform, "project": PROJECT,
                "needs_glibc": needed_glibc([w["file"] for w in wheels]), "wheels": wheels}
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def check_bundle(bundle: Path, pins: dict[str, str]) -> list[str]:
    """Every problem of ``bundle`` against ``pins`` (module docstring), each naming its file or pin."""
    path = bundle / MANIFEST
    if not path.is_file():
        return [f"{path}: missing (python scripts/gpu_bundle.py build writes it)"]
    manifest = json.loads(path.read_text())
    problems, listed, found = [], {}, {p.name for p in bundle.glob("*.whl")}
    for entry in manifest.get("wheels", []):
        listed[entry["file"]] = entry
        file = bundle / entry["file"]
        if not file.is_file():
            problems.append(f"{entry['file']}: in the manifest, not in the bundle")
        elif file.stat().st_size != entry["bytes"] or sha256(file) != entry["sha256"]:
            problems.append(f"{entry['file']}: size or sha256 differs from the manifest")
        else:
            problem = wheel_problem(entry["file"], manifest["python_version"], manifest["platform"])
            if problem:
                problems.append(problem)
    problems += [f"{name}: in the bundle, not in the manifest" for name in sorted(found - set(listed))]
    by_name: dict[str, list[str]] = {}
    for entry in listed.values():
        by_name.setdefault(canonicalize_name(entry["name"]), []).append(entry["version"])
    for name, version in sorted(pins.items()):
        versions = by_name.pop(name, [])
        if versions != [version]:
            problems.append(f"pin {name}=={version}: the bundle has {versions or 'no wheel'}")
    if len(by_name.pop(canonicalize_name(PROJECT), [])) != 1:
        problems.append(f"{PROJECT}: exactly one wheel of this package expected")
    problems += [f"{name} {versions}: not pinned (deploy/gpu_pins.txt)" for name, versions in sorted(by_name.items())]
    return problems


def download_commands(bundle: Path, pins_file: Path, python_version: str, platform: str,
                      python: str = sys.executable) -> list[list[str]]:
    """The pip commands ``build`` runs: the binary wheels of every pin but :data:`SOURCE_ONLY` for the target,
    a wheel of each source-only pin, and this checkout's wheel."""
    pins = read_pins(pins_file)
    binary = [f"{name}=={version}" for name, version in sorted(pins.items()) if name not in SOURCE_ONLY]
    target = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in platform_tags(platform):
        target += ["--platform", tag]
    commands = [[python, "-m", "pip", "download", "--no-deps", *target, "-d", str(bundle), *binary]]
    commands += [[python, "-m", "pip", "wheel", "--no-deps", "-w", str(bundle), f"{name}=={pins[name]}"]
                 for name in sorted(SOURCE_ONLY & set(pins))]
    commands.append([python, "-m", "pip", "wheel", "--no-deps", "-w", str(bundle), str(ROOT)])
    return commands


def install_command(bundle: Path, target: Path | None = None, python: str = sys.executable) -> list[str]:
    """pip, offline, from the bundle only: the pins and this package, nothing resolved beyond them; into
    ``target`` (a folder for ``PYTHONPATH``, beside a site-packages that may be read-only) when given."""
    project = sorted(bundle.glob(canonicalize_name(PROJECT).replace("-", "_") + "-*.whl"))
    into = ["--target", str(target)] if target else []
    return [python, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(bundle), *into,
            "-r", str(bundle / PINS.name), *(str(p) for p in project)]


SMOKE = """
import importlib, sys, time
from importlib.metadata import entry_points
failed = 0
def timed(what, load):
    global failed
    start = time.perf_counter()
    try:
        result = load()
    except Exception as exc:
        failed, result = failed + 1, f"FAILED {type(exc).__name__}: {exc}"
    print(f"{what:<20} {time.perf_counter() - start:6.1f} s  {result}", flush=True)
def module(name):
    loaded = importlib.import_module(name)
    return f"{getattr(loaded, '__version__', '')} from {loaded.__file__}".strip()
for name in sys.argv[1:]:
    timed(f"import {name.split('.')[-1]}", lambda: module(name))
plugins = entry_points(group="verl.plugins")  # verl loads them at import but hides a failure (debug log)
for plugin in plugins:
    timed(f"plugin {plugin.name}", lambda: f"{plugin.value}: loaded" if plugin.load() else "")
print(f"verl.plugins: {len(plugins)} entry point(s)")
sys.exit(1 if failed or not plugins else 0)
"""


def smoke(folder: Path | None, modules: tuple[str, ...] = STACK, python: str = sys.executable) -> int:
    """Import ``modules`` one by one in a fresh interpreter with ``folder`` first on ``PYTHONPATH``, printing
    each one's seconds and origin, then load each ``verl.plugins`` entry point; non-zero if an import or a
    plugin failed or no plugin is installed."""
    env = dict(os.environ)
    if folder is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(folder.resolve()), *filter(None, [env.get("PYTHONPATH")])])
    print(f"smoke: Python {sys.version.split()[0]}, PYTHONPATH={env.get('PYTHONPATH', '')}", flush=True)
    start = time.perf_counter()
    code = subprocess.run([python, "-P", "-c", SMOKE, *modules], env=env).returncode  # -P: not the cwd
    print(f"smoke: {time.perf_counter() - start:.1f} s, exit {code}")
    return code


def build(bundle: Path, python_version: str, platform: str) -> int:
    missing = missing_wheels(json.loads(WHEELS.read_text()), read_pins(PINS), python_version, platform)
    if missing:
        print(f"--python-version {python_version} --platform {platform}: " + "; ".join(missing), file=sys.stderr)
        return 1
    bundle.mkdir(parents=True, exist_ok=True)
    for command in download_commands(bundle, PINS, python_version, platform):
        print("+", " ".join(command[:8]), "..." if len(command) > 8 else "", flush=True)
        subprocess.run(command, check=True)
    shutil.copy(PINS, bundle / PINS.name)
    manifest = write_manifest(bundle, python_version, platform)
    return report(bundle, f"{len(manifest['wheels'])} wheels for Python {python_version} on {platform} "
                          f"(newest glibc needed: {manifest['needs_glibc']})")


def install(bundle: Path, target: Path | None) -> int:
    """Check the bundle and that it was built for this Python, pip-install it, then run the smoke check."""
    if report(bundle, "check before install"):
        return 1
    built_for, here = json.loads((bundle / MANIFEST).read_text())["python_version"], "%d.%d" % sys.version_info[:2]
    if built_for != here:
        print(f"{bundle}: built for Python {built_for}, this is Python {here} (build with --python-version {here})")
        return 1
    manifest = json.loads((bundle / MANIFEST).read_text())
    gaps = base_gaps(declared_from_base(bundle, manifest["python_version"], manifest["platform"]), installed_version)
    print(f"what the bundle's wheels declare and this Python's base lacks: {len(gaps)} (the recipe ran without "
          "accelerate, peft, wandb, tensorboard, pybind11, flashinfer; docs/gpu.md)")
    for gap in gaps:
        print(f"  {gap}")
    start = time.perf_counter()
    code = subprocess.run(install_command(bundle.resolve(), target)).returncode
    print(f"pip install: {time.perf_counter() - start:.1f} s, exit {code}", flush=True)
    return code or smoke(target)


def refresh_wheels(check: bool) -> int:
    """Write deploy/gpu_wheels.json from the index pip uses (``PIP_INDEX_URL`` or pip's default), or with
    ``check`` say whether the committed record still matches it."""
    from pip._internal.models.index import PyPI

    index = os.environ.get("PIP_INDEX_URL") or PyPI.simple_url
    text = record_text(fetch_record(read_pins(PINS), index))
    if not check:
        WHEELS.write_text(text)
        print(f"{WHEELS}: written from {index}")
        return 0
    same = WHEELS.read_text() == text
    print(f"{WHEELS}: " + ("matches" if same else "differs from") + f" {index}" +
          ("" if same else " (python scripts/gpu_bundle.py wheels rewrites it)"))
    return 0 if same else 1


def report(bundle: Path, what: str) -> int:
    problems = check_bundle(bundle, read_pins(bundle / PINS.name if (bundle / PINS.name).is_file() else PINS))
    print(f"{bundle}: {what}: " + ("OK" if not problems else f"{len(problems)} problem(s)"))
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download and build the wheels, write and check the manifest")
    b.add_argument("bundle", type=Path)
    b.add_argument("--python-version", default="3.12")
    b.add_argument("--platform", default=PLATFORM, help="the node's manylinux_2_<glibc>_<arch>")
    sub.add_parser("check", help="check a bundle against the pins").add_argument("bundle", type=Path)
    i = sub.add_parser("install", help="check, pip install --no-index, smoke check")
    i.add_argument("bundle", type=Path)
    i.add_argument("--target", type=Path, help="install into this folder (then PYTHONPATH=FOLDER)")
    sub.add_parser("smoke", help="import the stack, list verl.plugins").add_argument("folder", type=Path, nargs="?")
    w = sub.add_parser("wheels", help=f"refresh deploy/{WHEELS.name} from the index (network)")
    w.add_argument("--check", action="store_true", help="only compare the committed record with the index")
    args = p.parse_args(argv)
    if args.command == "build":
        return build(args.bundle.resolve(), args.python_version, args.platform)
    if args.command == "check":
        return report(args.bundle, "check")
    if args.command == "install":
        return install(args.bundle, args.target)
    if args.command == "smoke":
        return smoke(args.folder)
    return refresh_wheels(args.check)


if __name__ == "__main__":
    sys.exit(main())
