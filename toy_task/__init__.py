"""A CPU task on which RL can be seen to learn in ~100 steps: multi-digit addition written digit by digit.

``toy_task.addition`` (problems, the worked solution, local errors), ``toy_task.rows`` (verl parquet rows,
``data_source="ibpo/toy_addition"``), ``toy_task.warm_start`` (tiny model + SFT warm start + assets CLI).
It does not import ``data_prep``; the rows follow the same verl schema.
"""
