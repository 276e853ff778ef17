"""agentlog inside the agent frameworks: one module per framework.

Each module imports its framework, installed with the matching extra:
``pip install "agentlog[openai-agents]"`` for
:mod:`agentlog.integrations.openai_agents`, ``pip install
"agentlog[langgraph]"`` for :mod:`agentlog.integrations.langgraph`.
"""
