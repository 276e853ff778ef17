"""The agentlog command line, as a user runs it: ``python -m agentlog …``."""
