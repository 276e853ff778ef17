"""``python -m agentlog`` runs the command line."""

from agentlog.cli import main

main()
