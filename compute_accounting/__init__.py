"""What a run costs, for every method: the FLOP counter (``flops``), the compute budget and its ledger (``budget``)
and the GPU-time cost model (``gpu_time``). Pure: imports no verl and no method package."""
