"""agentlog's benchmark: ``python -m benchmarks`` (or ``agentlog bench``) from a checkout."""
