"""The recipe layer of IBPO's correction pass, the one place its verl glue lives (the math is in ``ibpo/``):

- ``batch``: DataProto in, DataProto out around the trainer's two ``generate_sequences`` calls (plan, read,
  shape, the joint rows, the token mask); no Ray, no workers;
- ``rollout``: the correction rollout's start checks and settings (lookup speculation, the length bound);
- ``spec_counters``: the speculation counters the rollout servers report, scraped once per step;
- ``agent_loop``: verl's single-turn agent loop with a per-row ``max_tokens`` (imported by verl's agent-loop
  workers through ``recipe.ibpo.verl_plugin``).

Nothing is imported here: an agent-loop worker that loads ``agent_loop`` does not pay for ``batch``.
"""
