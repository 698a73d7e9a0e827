"""The project's two demo tasks on CPU, in one package (docs/architecture.md).

- Multi-digit addition written digit by digit, on which RL can be seen to learn in ~100 steps (the evidence,
  docs/evidence.md): ``toy_task.addition`` (problems, the worked solution, local errors), ``toy_task.rows``
  (verl parquet rows, ``data_source="ibpo/toy_addition"``, written by ``data_prep.common``'s row writer), ``toy_task.warm_start``
  (tiny model + SFT warm start + assets CLI).
- The quickstart's arithmetic task (``python -m recipe.ibpo.quickstart``): ``toy_task.synthetic_task`` (rows via
  ``data_prep.common``, SFT warm start, CPU demo assets).
- ``toy_task.sft``: what both warm starts share (the SFT collate, sampled accuracy); the task modules do not
  import each other.
"""
