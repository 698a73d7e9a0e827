"""Running the pinned verl's real training loop on a CPU-only machine (see ``README.md`` in this folder).

* :mod:`.plugin` — the ``verl.plugins`` entry point: registers the ``cpu`` platform and the ``hf``
  rollout backend; patches only when ``VERL_PLATFORM=cpu``.
* :mod:`.platform_cpu`, :mod:`.patches`, :mod:`.import_hooks` — what the plugin installs.
* :mod:`.hf_rollout` — transformers ``generate`` behind verl's rollout-server protocol.
* :mod:`.launch` — environment, Hydra overrides and a hang-proof runner for CPU runs.
* :mod:`.tiny_assets` — a tiny local Qwen2-style model and BPE chat tokenizer (no hub access).

This package must stay import-free: verl imports the plugin (and so this ``__init__``) in every process.
"""
