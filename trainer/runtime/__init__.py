"""The distributed runtime: processes, process groups, pipelining, the exchange, checkpoints."""
