"""One GPU: ``python -m recipe.ibpo.quickstart --gpu`` (vLLM rollout, FSDP2 actor on CUDA) end to end, with its
Hugging Face checkpoint. Runs only where a CUDA device and vLLM are present; elsewhere it is skipped with the
reason (CPU CI has neither). Measured runs are recorded in docs/gpu.md."""

from __future__ import annotations

import importlib.util

import pytest

from recipe.ibpo.quickstart import latest_hf_checkpoint, main
from verl_cpu.launch import read_metrics_jsonl

pytestmark = pytest.mark.e2e


def gpu_skip_reason() -> str | None:
    """Why the GPU quickstart cannot run here, or None."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device: the --gpu quickstart needs one NVIDIA GPU (docs/gpu.md)"
    if importlib.util.find_spec("vllm") is None:
        from recipe.common.upstream import pinned_verl_version

        return f"vLLM is not installed: pip install 'verl[vllm]=={pinned_verl_version()}' (docs/gpu.md)"
    return None


SKIP_REASON = gpu_skip_reason()


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_gpu_quickstart_trains_and_saves_a_loadable_checkpoint(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    rc = main(["--gpu", "--out", str(tmp_path), "--steps", "2", "--timeout", "900"])
    out = capsys.readouterr().out
    assert rc == 0, out[-4000:]
    assert "[quickstart] step 1/2" in out and "[quickstart] step 2/2" in out
    metrics = read_metrics_jsonl(tmp_path / "ibpo_binary_metrics.jsonl")
    assert sorted(s for s in metrics if s > 0) == [1, 2]
    assert all(metrics[s]["actor/grad_norm"] > 0 for s in (1, 2))
    assert all(metrics[s]["ibpo/num_corrections"] == metrics[s]["ibpo/num_wrong"] for s in (1, 2))
    checkpoint = latest_hf_checkpoint(tmp_path / "checkpoints" / "ibpo_binary")
    assert checkpoint is not None and checkpoint.parent.parent.name == "global_step_2"
    AutoModelForCausalLM.from_pretrained(checkpoint)
    assert "-m evaluation.evaluate run --model" in out and "-m evaluation.plot_curves" in out
