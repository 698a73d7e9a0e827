"""After training: ``python -m evaluation.evaluate`` (avg@k, pass@k, baselines, paired comparisons),
``python -m evaluation.plot_curves`` (curves on the axis the runs were matched on) and ``evaluation.stats`` (the
intervals and tests both use; docs/evaluation.md)."""
