"""What a run costs, for every method: the FLOP counter (``flops``), the compute budget and its ledger (``budget``),
the GPU-time cost model (``gpu_time``) and the longest row of each phase against verl's micro-batch token limits
(``row_lengths``). Pure: imports no verl and no method package."""
