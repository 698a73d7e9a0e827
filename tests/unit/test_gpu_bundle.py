"""scripts/gpu_bundle.py's manifest and its check against the pins, on fake bundles (no download here), and
the pip commands build and install would run."""

from __future__ import annotations

import importlib.util
import json
import sys
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
    install = bundle_mod.install_command(folder, "py")
    assert install[:4] == ["py", "-m", "pip", "install"] and {"--no-index", "--no-deps"} <= set(install)
    assert install[install.index("--find-links") + 1] == str(folder)
    assert install[-1] == str(folder / WHEELS["project"]) and install[install.index("-r") + 1] == str(folder / "gpu_pins.txt")
