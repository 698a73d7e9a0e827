"""scripts/gpu_bundle.py: every pin has a wheel for the default target (by the committed record of the index,
deploy/gpu_wheels.json; no network here), the manifest and its check against the pins on fake bundles, the pip
commands build and install would run, and the smoke check through PYTHONPATH."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
bundle_mod = importlib.util.module_from_spec(spec)
sys.modules["gpu_bundle"] = bundle_mod
spec.loader.exec_module(bundle_mod)

PINS = {"vllm": "0.24.0", "ray": "2.60.0", "antlr4-python3-runtime": "4.9.3", "math-verify": "0.9.0"}
WHEELS = {"vllm": "vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl",
          "ray": "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl",
          "antlr4-python3-runtime": "antlr4_python3_runtime-4.9.3-py3-none-any.whl",
          "math-verify": "math_verify-0.9.0-py3-none-any.whl",
          "project": "ibpo_verl-0.1.0-py3-none-any.whl"}


def fake_bundle(folder: Path, wheels: dict[str, str] = WHEELS, platform: str = "manylinux_2_28_x86_64") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(wheels.values()):
        (folder / name).write_bytes(b"PK fake wheel %d" % i)
    (folder / "gpu_pins.txt").write_text("# pins\n" + "".join(f"{k}=={v}\n" for k, v in PINS.items()))
    bundle_mod.write_manifest(folder, "3.12", platform)
    return folder


def test_the_projects_gpu_pins_are_the_run_set_and_agree_with_the_pinned_verl():
    from recipe.common.upstream import pinned_verl_version

    pins = bundle_mod.read_pins(bundle_mod.PINS)
    assert len(pins) == 111 and pins["verl"] == pinned_verl_version()
    assert (pins["vllm"], pins["transformers"], pins["ray"], pins["hydra-core"]) == ("0.24.0", "5.9.0", "2.60.0", "1.3.8")
    assert "torch" not in pins and "flash-attn" not in pins  # the base provides torch; flash-attn is not used


def test_a_complete_bundle_checks_clean_and_records_what_it_needs(tmp_path):
    folder = fake_bundle(tmp_path / "b")
    assert bundle_mod.check_bundle(folder, PINS) == []
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["needs_glibc"] == "2.28" and manifest["python_version"] == "3.12"
    entry = next(w for w in manifest["wheels"] if w["name"] == "ray")
    assert entry["version"] == "2.60.0" and entry["tags"] == ["cp312-cp312-manylinux2014_x86_64"]
    assert len(entry["sha256"]) == 64 and entry["bytes"] == len(b"PK fake wheel 1")


@pytest.mark.parametrize("change, expected", [
    ({"ray": "ray-2.59.0-cp312-cp312-manylinux2014_x86_64.whl"}, "pin ray==2.60.0: the bundle has ['2.59.0']"),
    ({"ray": None}, "pin ray==2.60.0: the bundle has no wheel"),
    ({"extra": "numpy-2.3.0-cp312-cp312-manylinux_2_28_x86_64.whl"}, "numpy ['2.3.0']: not pinned"),
    ({"ray": "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"}, "do not fit Python 3.12 on manylinux_2_28_x86_64"),
    ({"vllm": "vllm-0.24.0-cp38-abi3-manylinux_2_31_x86_64.whl"}, "do not fit Python 3.12 on manylinux_2_28_x86_64"),
    ({"project": None}, "ibpo-verl: exactly one wheel of this package expected"),
])
def test_each_mismatch_with_the_pins_is_named(tmp_path, change, expected):
    wheels = {**WHEELS, **change}
    folder = fake_bundle(tmp_path / "b", {k: v for k, v in wheels.items() if v is not None})
    problems = bundle_mod.check_bundle(folder, PINS)
    assert any(expected in p for p in problems), problems


def test_files_must_match_the_manifest(tmp_path):
    folder = fake_bundle(tmp_path / "b")
    (folder / WHEELS["ray"]).write_bytes(b"PK tampered!!!!")
    (folder / "stray-1.0-py3-none-any.whl").write_bytes(b"x")
    (folder / WHEELS["math-verify"]).unlink()
    problems = bundle_mod.check_bundle(folder, PINS)
    assert f"{WHEELS['ray']}: size or sha256 differs from the manifest" in problems
    assert "stray-1.0-py3-none-any.whl: in the bundle, not in the manifest" in problems
    assert f"{WHEELS['math-verify']}: in the manifest, not in the bundle" in problems
    assert bundle_mod.check_bundle(tmp_path / "empty", PINS)[0].endswith("manifest.json: missing "
                                                                         "(python scripts/gpu_bundle.py build writes it)")


def test_platform_tags_are_those_the_nodes_glibc_runs():
    tags = bundle_mod.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux1_x86_64" in tags and "manylinux_2_31_x86_64" not in tags
    assert "manylinux2014_x86_64" not in bundle_mod.platform_tags("manylinux_2_12_x86_64")
    with pytest.raises(ValueError, match="expected manylinux_2_<glibc minor>_<arch>"):
        bundle_mod.platform_tags("linux_x86_64")


def test_pins_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "pins.txt"
    bad.write_text("vllm==0.24.0\nray>=2.0\n")
    with pytest.raises(ValueError, match=r"pins.txt:2: 'ray>=2.0' is not name==version"):
        bundle_mod.read_pins(bad)
    bad.write_text("ray==2.60.0\nRay==2.60.0\n")
    with pytest.raises(ValueError, match="pins.txt:2: ray pinned twice"):
        bundle_mod.read_pins(bad)


def test_build_and_install_commands(tmp_path):
    pins = tmp_path / "gpu_pins.txt"
    pins.write_text("".join(f"{k}=={v}\n" for k, v in PINS.items()))
    download, antlr, project = bundle_mod.download_commands(tmp_path / "b", pins, "3.12", "manylinux_2_28_x86_64", "py")
    assert download[:4] == ["py", "-m", "pip", "download"] and "--no-deps" in download
    assert "--only-binary=:all:" in download and download[download.index("--python-version") + 1] == "3.12"
    assert download.count("--platform") == len(bundle_mod.platform_tags("manylinux_2_28_x86_64"))
    assert "vllm==0.24.0" in download and not any(a.startswith("antlr4") for a in download)
    assert antlr[-1] == "antlr4-python3-runtime==4.9.3" and antlr[3] == "wheel"
    assert project[-1] == str(bundle_mod.ROOT)
    folder = fake_bundle(tmp_path / "c")
    install = bundle_mod.install_command(folder, python="py")
    assert install[:4] == ["py", "-m", "pip", "install"] and {"--no-index", "--no-deps"} <= set(install)
    assert install[install.index("--find-links") + 1] == str(folder) and "--target" not in install
    assert install[-1] == str(folder / WHEELS["project"]) and install[install.index("-r") + 1] == str(folder / "gpu_pins.txt")
    into = bundle_mod.install_command(folder, tmp_path / "site", "py")
    assert into[into.index("--target") + 1] == str(tmp_path / "site") and into[-1] == install[-1]


# ------------------------------------------------------------------ the pins against the index's wheels
def committed_record() -> dict[str, list[str]]:
    return json.loads(bundle_mod.WHEELS.read_text())


def test_every_pin_has_a_wheel_for_the_default_target():
    record, pins = committed_record(), bundle_mod.read_pins(bundle_mod.PINS)
    assert sorted(record) == sorted(pins)  # the record is of these pins (a changed pin: refresh it)
    assert bundle_mod.missing_wheels(record, pins, "3.12", bundle_mod.PLATFORM) == []


def test_the_previous_default_platform_lacks_llguidance_and_build_refuses_it(tmp_path, capsys):
    record, pins = committed_record(), bundle_mod.read_pins(bundle_mod.PINS)
    assert bundle_mod.missing_wheels(record, pins, "3.12", "manylinux_2_28_x86_64") == [
        "llguidance==1.7.6: no wheel for Python 3.12 on manylinux_2_28_x86_64 (its wheels for Python 3.12 are "
        "for manylinux_2_31_aarch64, manylinux_2_31_x86_64, manylinux_2_34_i686, manylinux_2_39_riscv64)"]
    assert bundle_mod.main(["build", str(tmp_path / "b"), "--platform", "manylinux_2_28_x86_64"]) == 1
    assert "llguidance==1.7.6: no wheel" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_a_record_that_does_not_match_the_pins_is_named():
    record = {"ray": ["ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"], "llguidance": ["llguidance-1.7.6.tar.gz"]}
    problems = bundle_mod.missing_wheels(record, {"ray": "2.61.0", "vllm": "0.24.0", "llguidance": "1.7.6"},
                                         "3.12", bundle_mod.PLATFORM)
    assert problems == [
        "llguidance==1.7.6: no wheel for Python 3.12 on manylinux_2_31_x86_64 (its wheels for Python 3.12 are "
        "for no platform)",
        "ray==2.61.0: gpu_wheels.json has ['2.60.0'] (python scripts/gpu_bundle.py wheels refreshes it)",
        "vllm==0.24.0: gpu_wheels.json has no files (python scripts/gpu_bundle.py wheels refreshes it)"]


def test_a_pins_files_are_read_from_the_indexs_json_page():
    page = {"files": [{"filename": f} for f in (
        "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl", "ray-2.60.0-cp312-cp312-win_amd64.whl",
        "ray-2.60.0-cp312-cp312-macosx_12_0_arm64.whl", "ray-2.60.0-py3-none-any.whl", "ray-2.59.0-py3-none-any.whl",
        "ray-2.60.0.tar.gz", "ray-2.60.0-rc1.tar.gz", "ray-2.60.0.exe")]}
    page["files"].append({"filename": "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl", "yanked": "broken"})
    assert bundle_mod.pin_files(page, "2.60.0") == ["ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl",
                                                    "ray-2.60.0-py3-none-any.whl", "ray-2.60.0.tar.gz"]


def test_the_committed_record_is_in_the_refresh_commands_format():
    record = committed_record()
    assert bundle_mod.WHEELS.read_text() == bundle_mod.record_text(record)
    assert record["antlr4-python3-runtime"] == ["antlr4-python3-runtime-4.9.3.tar.gz"]  # SOURCE_ONLY: built here


def test_wheel_tags_are_matched_as_pip_matches_them():
    for fits in ("interegular-0.3.3-py37-none-any.whl", "six-1.0-py2.py3-none-any.whl",
                 "tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                 "llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl"):
        assert bundle_mod.wheel_problem(fits, "3.12", "manylinux_2_31_x86_64") is None, fits
    for misfit in ("llguidance-1.7.6-cp314-cp314t-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                   "x-1.0-cp313-abi3-manylinux_2_17_x86_64.whl", "x-1.0-py313-none-any.whl",
                   "x-1.0-cp312-cp312-manylinux_2_31_aarch64.whl"):
        assert bundle_mod.wheel_problem(misfit, "3.12", "manylinux_2_31_x86_64") is not None, misfit


# ------------------------------------------------------------------ install into a folder, smoke check
def test_install_refuses_a_bundle_built_for_another_python(tmp_path, capsys, monkeypatch):
    other = "3.10" if sys.version_info[:2] != (3, 10) else "3.13"
    folder = fake_bundle(tmp_path / "b", {k: WHEELS[k] for k in ("math-verify", "antlr4-python3-runtime", "project")})
    (folder / "gpu_pins.txt").write_text("math-verify==0.9.0\nantlr4-python3-runtime==4.9.3\n")
    bundle_mod.write_manifest(folder, other, "manylinux_2_31_x86_64")
    monkeypatch.setattr(bundle_mod.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    assert bundle_mod.main(["install", str(folder), "--target", str(tmp_path / "site")]) == 1
    here = "%d.%d" % sys.version_info[:2]
    assert f"built for Python {other}, this is Python {here} (build with --python-version {here})" in \
        capsys.readouterr().out


def plugin_folder(folder: Path) -> Path:
    """A folder as pip --target leaves it: a module and its distribution's verl.plugins entry point."""
    folder.mkdir(parents=True)
    (folder / "fake_plugin_mod.py").write_text("__version__ = '7.1'\n")
    info = folder / "fake_plugin-7.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 7.1\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\nfake = fake_plugin_mod\n")
    return folder


def test_the_smoke_check_imports_through_pythonpath_and_loads_the_plugins(tmp_path, capfd):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    python = str(tmp_path / "bare" / "bin" / "python")  # a base without this project's own entry points
    folder = plugin_folder(tmp_path / "site")
    assert bundle_mod.smoke(folder, ("json", "fake_plugin_mod"), python) == 0
    out = capfd.readouterr().out
    assert f"7.1 from {folder.resolve() / 'fake_plugin_mod.py'}" in out
    assert "plugin fake" in out and "fake_plugin_mod: loaded" in out and "verl.plugins: 1 entry point(s)" in out
    assert bundle_mod.smoke(folder, ("fake_plugin_mod", "no_such_module_here"), python) == 1
    assert "FAILED ModuleNotFoundError: No module named 'no_such_module_here'" in capfd.readouterr().out
    (folder / "fake_plugin_mod.py").write_text("raise RuntimeError('plugin broke')\n")
    assert bundle_mod.smoke(folder, ("json",), python) == 1
    assert "FAILED RuntimeError: plugin broke" in capfd.readouterr().out
    (tmp_path / "empty").mkdir()
    assert bundle_mod.smoke(tmp_path / "empty", ("json",), python) == 1
    assert "verl.plugins: 0 entry point(s)" in capfd.readouterr().out


def wheel_with(folder: Path, filename: str, requires: list[str]) -> None:
    """A wheel file whose only content is its METADATA (name, version, Requires-Dist lines)."""
    name, version = filename.split("-")[:2]
    with zipfile.ZipFile(folder / filename, "w") as wheel:
        wheel.writestr(f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: "
                       f"{version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires))


def test_what_the_bundle_needs_from_the_base_follows_extras_and_markers(tmp_path):
    wheel_with(tmp_path, "app-1.0-py3-none-any.whl", ["lib[fast]>=1", "numpy>=2,<2.4", "old; python_version < '3'",
                                                     "arm; platform_machine == 'aarch64'", "dev; extra == 'test'"])
    wheel_with(tmp_path, "lib-1.0-py3-none-any.whl", ["uvloop; extra == 'fast'", "slow; extra == 'slow'", "numpy"])
    declared = bundle_mod.declared_from_base(tmp_path, "3.12", "manylinux_2_31_x86_64")
    assert {n: sorted(f"{r} ({w})" for r, w in reqs) for n, reqs in declared.items()} == {
        "numpy": ["numpy (lib)", "numpy<2.4,>=2 (app)"], "uvloop": ['uvloop; extra == "fast" (lib)']}
    assert bundle_mod.base_gaps(declared, {"numpy": "2.4.6"}.get) == [
        "numpy 2.4.6: outside <2.4,>=2 (app)", "uvloop: not installed (declared by lib)"]
    assert bundle_mod.base_gaps(declared, {"numpy": "2.3.0", "uvloop": "0.21"}.get) == []
