"""The speculation counters the correction pass's rollout servers report, scraped once per step from their
Prometheus endpoint (``recipe.ibpo.step_metrics.SpeculationCounters`` logs them as ``rollout/spec_*``).

Read from the rollout itself: every vLLM server verl starts serves its Prometheus registry at
``http://<server address>/metrics`` (vLLM's API server mounts it, ``vllm/entrypoints/serve/instrumentator/
metrics.py``). With log stats on, the scheduler adds one ``SpecDecodingStats.observe_draft`` per request-step
that carried drafts (``vllm/v1/core/sched/scheduler.py:1548-1575``, ``vllm/v1/spec_decode/metrics.py:18-48``:
``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``) and the frontend adds them to the counters below
(``SpecDecodingProm.observe``, same file 176-270; ``vllm:generation_tokens`` counts every emitted token,
``vllm/v1/metrics/loggers.py:667-674``, ``vllm/v1/metrics/stats.py:362``). The counters exist for every method
alike, ngram and suffix included. The pinned vLLM has no per-request speculation statistics
(``RequestStateStats``, ``vllm/v1/metrics/stats.py:202-220``, has none), so the pinned verl's per-request
forwarding (``request_spec_decode_stats``, MTP rollouts only) finds nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

SPEC_PROM_COUNTERS = {  # field -> vLLM 0.24.0 counter name (exposed with the ``_total`` suffix)
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
    "generated_tokens": "vllm:generation_tokens",
}


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative (or per-step) sums of vLLM's ``SpecDecodingStats`` fields ``num_drafts``, ``num_draft_tokens``,
    ``num_accepted_tokens`` and of the generated tokens, over the rollout's engines."""
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    generated_tokens: float = 0.0

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        return SpecCounters(*(getattr(self, f) + getattr(other, f) for f in SPEC_PROM_COUNTERS))

    def since(self, earlier: "SpecCounters | None") -> "SpecCounters":
        """The counts added after ``earlier``; all of ``self`` when a counter went down (an engine restarted)."""
        if earlier is None or any(getattr(self, f) < getattr(earlier, f) for f in SPEC_PROM_COUNTERS):
            return self
        return SpecCounters(*(getattr(self, f) - getattr(earlier, f) for f in SPEC_PROM_COUNTERS))


def spec_counters_from_prometheus(text: str) -> SpecCounters | None:
    """The :class:`SpecCounters` of one server's Prometheus text exposition (``/metrics``), summed over its label
    sets (engines, models). None when it has no ``vllm:generation_tokens`` (stats off: nothing can be said); a
    missing speculation counter counts 0 (vLLM registers them only when the engine speculates)."""
    wanted = {f"{name}_total": field for field, name in SPEC_PROM_COUNTERS.items()}
    sums = dict.fromkeys(SPEC_PROM_COUNTERS, 0.0)
    seen = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.split()[0]
        field = wanted.get(name.strip())
        if field is None:
            continue
        rest = line[line.rindex("}") + 1:] if brace >= 0 else line[len(name):]
        sums[field] += float(rest.split()[0])
        seen.add(field)
    if "generated_tokens" not in seen:
        return None
    return SpecCounters(**sums)


def spec_counter_metrics(speculating: bool, step: SpecCounters | None) -> dict:
    """Per-step speculation metrics from the counts the engines added during the step (``step``).

    ``rollout/spec_accepted_per_decode_step``: accepted draft tokens per decode step, a decode step being one
    request's one forward pass (each emits 1 + its accepted tokens, so steps = generated - accepted); 0 both
    when no draft was accepted and when none was made. ``rollout/spec_drafted_step_share``: the share of decode
    steps that carried a draft — 0 with tokens generated means speculation was OFF, a positive share with a low
    acceptance means it ran without a speed-up. ``rollout/spec_accepted_per_draft`` (vLLM's mean acceptance
    length - 1) and ``rollout/spec_acceptance_rate`` (accepted / drafted tokens), the raw counts, and
    ``rollout/spec_stats_reported`` = 1; = 0 alone when the counters could not be read. A rate over no decode step
    (nothing generated) or no draft is left out, not logged as 0: a 0 there would read as "off" or "none accepted"."""
    if not speculating:
        return {}
    if step is None:
        return {"rollout/spec_stats_reported": 0.0}
    steps = step.generated_tokens - step.accepted_tokens
    metrics = {
        "rollout/spec_stats_reported": 1.0,
        "rollout/spec_drafts": step.drafts,
        "rollout/spec_draft_tokens": step.draft_tokens,
        "rollout/spec_accepted_tokens": step.accepted_tokens,
        "rollout/spec_decode_steps": steps,
    }
    if steps > 0:
        metrics["rollout/spec_accepted_per_decode_step"] = step.accepted_tokens / steps
        metrics["rollout/spec_drafted_step_share"] = step.drafts / steps
    if step.drafts:
        metrics["rollout/spec_accepted_per_draft"] = step.accepted_tokens / step.drafts
    if step.draft_tokens:
        metrics["rollout/spec_acceptance_rate"] = step.accepted_tokens / step.draft_tokens
    return metrics


def _http_get(url: str, timeout: float) -> str:
    from urllib.request import urlopen

    with urlopen(url, timeout=timeout) as response:  # noqa: S310 - the rollout servers' own addresses
        return response.read().decode("utf-8", errors="replace")


class SpecCounterReader:
    """Reads the rollout servers' speculation counters once per step and returns what the step added.

    ``addresses`` are verl's server addresses (``host:port``, ``LLMServerManager.server_addresses``); ``fetch``
    (url, timeout) -> text is injectable for tests. The first read counts from the servers' start (their
    counters start at 0 with the engine)."""

    def __init__(self, addresses: list[str], fetch: Callable[[str, float], str] | None = None,
                 timeout: float = 5.0):
        self.addresses = list(addresses)
        self.fetch = fetch or _http_get
        self.timeout = timeout
        self.previous: SpecCounters | None = None
        self.last_error: str | None = None

    def read(self) -> SpecCounters | None:
        """The current totals over all servers; None when a server cannot be read or reports no stats."""
        if not self.addresses:
            self.last_error = "no rollout server addresses"
            return None
        total = SpecCounters()
        for address in self.addresses:
            try:
                counters = spec_counters_from_prometheus(self.fetch(f"http://{address}/metrics", self.timeout))
            except Exception as exc:  # noqa: BLE001 - a metric must never stop training
                self.last_error = f"{address}: {type(exc).__name__}: {exc}"
                return None
            if counters is None:
                self.last_error = f"{address}: /metrics has no vllm:generation_tokens (log stats off?)"
                return None
            total = total + counters
        self.last_error = None
        return total

    def step(self) -> SpecCounters | None:
        """What the engines added since the previous successful :meth:`step` (None when unreadable now)."""
        now = self.read()
        if now is None:
            return None
        added = now.since(self.previous)
        self.previous = now
        return added
