"""ibpo-verl: counterfactual credit assignment (IBPO, counterfactual importance weighting) for the pinned verl."""

from pathlib import Path

from setuptools import find_packages, setup


def pinned_verl_requirement() -> str:
    """The one requirement line of recipe/common/REQUIRED_VERL.txt: the only place verl's version is written
    (recipe.common.upstream.pinned_verl_requirement reads the same file; docs/upgrading_verl.md)."""
    path = Path(__file__).parent / "recipe" / "common" / "REQUIRED_VERL.txt"
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    reqs = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(reqs) != 1 or not reqs[0].startswith("verl"):
        raise SystemExit(f"{path}: expected exactly one requirement line `verl[...]==<version>`, found {reqs}")
    return reqs[0]


# Versions verified together on CPU (torch 2.13.0+cpu, Python 3.11). Never add verl[cpu] or verl[fsdp]
# here: both pull torch builds with several GB of CUDA packages. Install torch first (README).
INSTALL_REQUIRES = [
    pinned_verl_requirement(),
    "math-verify[antlr4_9_3]==0.9.0",
    "rapidfuzz>=3.9",
    "numpy>=1.26",
    "pyarrow>=15",
    "datasets>=2.19",
    "psutil>=5.9",
]

EXTRAS = {
    "test": ["pytest>=8", "hypothesis>=6.100", "matplotlib>=3.8", "scipy>=1.17"],  # scipy: reference statistics
    "plots": ["matplotlib>=3.8"],
}

# The non-Python files of recipe/, by pattern (relative to recipe/): each folder's launch scripts and Hydra
# config, the verl pin, the stored verl texts and their manifest. A new method folder recipe/<name>/ ships
# without an edit here (docs/architecture.md, "Adding a method").
RECIPE_DATA = ["*/*.sh", "*/*.txt", "*/config/*.yaml", "*/upstream/*.txt", "*/upstream/*.toml"]

setup(
    name="ibpo-verl",
    version="0.1.0",
    description="IBPO and counterfactual importance weighting as a verl recipe/plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # `tests` and `scripts` are deliberately not packages: the pinned verl's wheel installs top-level
    # `tests` and `scripts` packages of its own into site-packages. `lab` (the evidence: experiments, reports,
    # benches) is not installed: it runs from the clone (lab/README.md).
    packages=find_packages(include=["compute_accounting", "compute_accounting.*", "ibpo", "ibpo.*", "counterfactual",
                                    "counterfactual.*", "option_types", "evaluation", "evaluation.*",
                                    "verl_cpu", "verl_cpu.*", "recipe", "recipe.*", "reward_fns", "reward_fns.*",
                                    "data_prep", "data_prep.*", "toy_task", "toy_task.*"]),
    package_data={"recipe": RECIPE_DATA, "compute_accounting": ["measured/*.json"]},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        # verl imports every entry point of this group at `import verl` (verl/__init__.py), in every process.
        "verl.plugins": [
            # every method folder's recipe/<folder>/verl_plugin.py (IBPO's: advantage estimator `ibpo`, agent loop
            # `ibpo_correction`); an install made before names `ibpo = recipe.verl_plugin`, an alias of IBPO's
            "methods = recipe.common.verl_plugin",
            "verl_cpu = verl_cpu.plugin",  # CPU platform + `hf` rollout (inert unless VERL_PLATFORM=cpu)
        ],
    },
)
