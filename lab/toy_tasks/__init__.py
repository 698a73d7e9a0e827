"""The evidence's CPU toy tasks (addition, three_sum), their rows and warm starts (``warm_starts/``: the committed
weights every evidence round starts from)."""
