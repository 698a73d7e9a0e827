"""The evidence's wing (lab/README.md): experiments, reports and benches run from the clone's root
(``python -m lab.analysis.ablation ...``, ``python lab/scripts/bench_gpu.py ...``). ``pip install`` does not
install it, and no installed package imports it (tests/unit/test_import_layers.py)."""
