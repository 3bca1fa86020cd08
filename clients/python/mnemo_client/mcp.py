"""An MCP server that gives any MCP client (Claude Desktop, Cursor, an agent SDK)
Mnemo's memory: ``remember``, ``recall`` and ``get-context``.

    pip install './clients/python[mcp]'
    MNEMO_URL=http://127.0.0.1:8000 MNEMO_API_KEY=mk_… MNEMO_USER_ID=u-42 \
        python -m mnemo_client.mcp            # stdio, as MCP clients launch servers

``build_server(client, user_id=…)`` gives the server object for other transports.
"""

from __future__ import annotations

import os
from typing import Any

from mcp.server.mcpserver import MCPServer

from mnemo_client._core import MnemoError
from mnemo_client.client import AsyncClient

INSTRUCTIONS = (
    "Long-term memory of the user. `remember` stores a fact, preference or rule; "
    "`recall` finds what was stored about a topic; `get-context` gives the compact "
    "context of a session (its task state, relevant memories and recent turns)."
)


def build_server(client: AsyncClient, *, user_id: str) -> MCPServer:
    server: MCPServer = MCPServer("mnemo", instructions=INSTRUCTIONS)

    @server.tool()
    async def remember(text: str, kind: str = "fact", pinned: bool = False) -> dict[str, Any]:
        """Store a memory of the user (kind: fact, preference, profile, rule, high_stakes).

        Pinned memories never expire. Saying the same thing again confirms it.
        """
        memory = await client.create_memory(user_id, text, kind=kind, pinned=pinned)
        return {"id": memory["id"], "text": memory["text"], "confirmed": memory["deduplicated"]}

    @server.tool()
    async def recall(query: str, limit: int = 5) -> list[dict[str, Any]]:
        """The user's memories that best match ``query``, best first."""
        try:
            found = await client.list_memories(user_id, query=query, limit=limit)
        except MnemoError as error:
            if error.status == 404:  # nothing remembered about this user yet
                return []
            raise
        return [{"id": m["id"], "text": m["text"], "kind": m["kind"]} for m in found["memories"]]

    @server.tool(name="get-context")
    async def get_context(session_id: str, max_tokens: int = 2000) -> str:
        """The session's context for the next model call, as text, within ``max_tokens``."""
        context = await client.get_context(session_id, max_tokens=max_tokens)
        return context["text"]

    return server


def main() -> None:
    client = AsyncClient(
        os.environ.get("MNEMO_URL", "http://127.0.0.1:8000"), os.environ.get("MNEMO_API_KEY")
    )
    build_server(client, user_id=os.environ["MNEMO_USER_ID"]).run("stdio")


if __name__ == "__main__":
    main()
