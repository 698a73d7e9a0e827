"""The quickstart's demo task on CPU (docs/architecture.md): ``toy_task.synthetic_task`` (the arithmetic task of
``python -m recipe.ibpo.quickstart``: rows via ``data_prep.common``, SFT warm start, CPU demo assets) and
``toy_task.sft`` (the SFT collate and sampled accuracy, which the evidence's warm starts in ``lab.toy_tasks`` share).
"""
