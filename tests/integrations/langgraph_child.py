"""The graph the LangGraph integration tests run, and a child process that resumes it.

Run by tests/integrations/test_langgraph.py as
``python langgraph_child.py AGENTLOG_DB ENGINE SQLITE_DB THREAD DECISION``: it
resumes the interrupted thread on both savers with ``Command(resume=DECISION)``
and prints the two final transcripts as JSON.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from agentlog.integrations.langgraph import AgentlogSaver


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    decision: str


def agent(state: State) -> dict[str, Any]:
    """Asks for a tool first, answers once a tool result is in."""
    messages = state["messages"]
    n = len(messages)
    if not any(isinstance(m, ToolMessage) for m in messages):
        call = {"name": "lookup", "args": {"q": messages[-1].content}, "id": f"call-{n}"}
        return {"messages": [AIMessage(content="", id=f"ai-{n}", tool_calls=[call])]}
    return {"messages": [AIMessage(content=f"answer after {n} messages", id=f"ai-{n}")]}


def tool(state: State) -> dict[str, Any]:
    """A tool-like node: answers the last tool call."""
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    call = last.tool_calls[0]
    result = ToolMessage(content=f"result for {call['args']['q']}", tool_call_id=call["id"])
    result.id = f"tool-{len(state['messages'])}"
    return {"messages": [result]}


def route(state: State) -> str:
    last = state["messages"][-1]
    return "tool" if isinstance(last, AIMessage) and last.tool_calls else "review"


def draft(state: State) -> dict[str, Any]:
    """The review subgraph's first node."""
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"draft of {n}", id=f"draft-{n}")]}


def approve(state: State) -> dict[str, Any]:
    """Human approval: stops the run until it is resumed with a decision."""
    decision = interrupt({"question": "send the draft?", "seen": len(state["messages"])})
    n = len(state["messages"])
    return {
        "messages": [HumanMessage(content=f"decision: {decision}", id=f"human-{n}")],
        "decision": str(decision),
    }


def build_graph(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """agent ⇄ tool, then a review subgraph (draft → approve) that interrupts."""
    review = StateGraph(State)
    review.add_node("draft", draft)
    review.add_node("approve", approve)
    review.add_edge(START, "draft")
    review.add_edge("draft", "approve")
    review.add_edge("approve", END)

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tool", tool)
    graph.add_node("review", review.compile())
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tool", "review"])
    graph.add_edge("tool", "agent")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=checkpointer)


def first_input(text: str = "weather in Paris") -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text, id="user-0")]}


def transcript(values: dict[str, Any]) -> list[str]:
    return [f"{type(m).__name__}:{m.content}" for m in values.get("messages", [])]


def main(argv: list[str]) -> None:
    agentlog_db, engine, sqlite_db, thread, decision = argv
    config = {"configurable": {"thread_id": thread}}
    out: dict[str, list[str]] = {}
    with AgentlogSaver(agentlog_db, engine=engine) as saver:
        out["agentlog"] = transcript(build_graph(saver).invoke(Command(resume=decision), config))
    conn = sqlite3.connect(sqlite_db, check_same_thread=False)
    try:
        graph = build_graph(SqliteSaver(conn))
        out["sqlite"] = transcript(graph.invoke(Command(resume=decision), config))
    finally:
        conn.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
