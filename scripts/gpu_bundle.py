#!/usr/bin/env python
"""An offline install bundle of the pinned GPU stack (deploy/gpu_pins.txt) plus this package, for a GPU node
without internet (docs/gpu.md, "A GPU node without internet").

On a machine with internet (any OS; the wheels are chosen for the target, not for this machine):

    python scripts/gpu_bundle.py build BUNDLE --python-version 3.12 --platform manylinux_2_28_x86_64

downloads every pin as a binary wheel for that Python and platform (``pip download --no-deps
--only-binary=:all: --python-version 3.12 --implementation cp --platform <each manylinux tag that glibc 2.28
runs>``), builds a wheel of antlr4-python3-runtime (published as a source archive only; pure Python) and of
this checkout, copies the pins and writes ``BUNDLE/manifest.json`` (each wheel's name, version, tags, size and
sha256; the Python and platform it was built for; the newest glibc a wheel needs), then checks it. Copy BUNDLE
to the node; there, with Python 3.12 and torch 2.11.0+cu130 already installed (the base the pins were run on):

    python scripts/gpu_bundle.py install BUNDLE        # check, then pip install --no-index --find-links BUNDLE

``install`` passes ``--no-deps``: the pins are the set the recipe ran with, not pip's closure of every declared
dependency (verl declares accelerate, peft, wandb, tensorboard and pybind11, which the runs did without).
``python scripts/gpu_bundle.py check BUNDLE`` checks a bundle anywhere: every pin has exactly its wheel, the
project's wheel is there, nothing else is, every file matches its size and sha256, and every wheel's tags fit
the bundle's Python and platform. Each problem names the file or pin.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "deploy" / "gpu_pins.txt"
PROJECT = "ibpo-verl"
SOURCE_ONLY = {"antlr4-python3-runtime"}  # no wheel on the index: built here (pure Python, py3-none-any)
MANIFEST = "manifest.json"
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


def python_tags(python_version: str) -> set[str]:
    """Interpreter tags a CPython of ``python_version`` (``3.12``) installs: cp312, py312, py3 (and abi3)."""
    major, minor = python_version.split(".")
    return {f"cp{major}{minor}", f"py{major}{minor}", f"py{major}"}


def wheel_problem(filename: str, python_version: str, platform: str) -> str | None:
    """Why a wheel does not install on the bundle's Python and platform, or None."""
    _, _, _, tags = parse_wheel_filename(filename)
    interpreters, platforms = python_tags(python_version), {"any", *platform_tags(platform)}
    abi_ok = {"none", "abi3", f"cp{python_version.replace('.', '')}"}
    major_minor = tuple(int(x) for x in python_version.split("."))
    for tag in tags:
        stable = tag.abi == "abi3" and tag.interpreter.startswith("cp") and \
            (int(tag.interpreter[2]), int(tag.interpreter[3:])) <= major_minor
        if (tag.interpreter in interpreters or stable) and tag.abi in abi_ok and tag.platform in platforms:
            return None
    return f"{filename}: tags {sorted(str(t) for t in tags)} do not fit Python {python_version} on {platform}"


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


def install_command(bundle: Path, python: str = sys.executable) -> list[str]:
    """pip, offline, from the bundle only: the pins and this package, nothing resolved beyond them."""
    project = sorted(bundle.glob(canonicalize_name(PROJECT).replace("-", "_") + "-*.whl"))
    return [python, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(bundle),
            "-r", str(bundle / PINS.name), *(str(p) for p in project)]


def build(bundle: Path, python_version: str, platform: str) -> int:
    bundle.mkdir(parents=True, exist_ok=True)
    for command in download_commands(bundle, PINS, python_version, platform):
        print("+", " ".join(command[:8]), "..." if len(command) > 8 else "", flush=True)
        subprocess.run(command, check=True)
    shutil.copy(PINS, bundle / PINS.name)
    manifest = write_manifest(bundle, python_version, platform)
    return report(bundle, f"{len(manifest['wheels'])} wheels for Python {python_version} on {platform} "
                          f"(newest glibc needed: {manifest['needs_glibc']})")


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
    b.add_argument("--platform", default="manylinux_2_28_x86_64", help="the node's manylinux_2_<glibc>_<arch>")
    for name in ("check", "install"):
        sub.add_parser(name).add_argument("bundle", type=Path)
    args = p.parse_args(argv)
    if args.command == "build":
        return build(args.bundle.resolve(), args.python_version, args.platform)
    if args.command == "check":
        return report(args.bundle, "check")
    if report(args.bundle, "check before install"):
        return 1
    return subprocess.run(install_command(args.bundle.resolve())).returncode


if __name__ == "__main__":
    sys.exit(main())
