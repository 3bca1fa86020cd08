"""Python client for Mnemo: ``Client`` (sync) and ``AsyncClient`` over httpx.

from mnemo_client import Client

with Client("http://127.0.0.1:8000", api_key="mk_…") as mnemo:
    mnemo.post_turns("s-1", "u-42", [{"role": "user", "content": "Hi"}])
    context = mnemo.get_context("s-1", max_tokens=2000)
    messages = context["messages"]  # send these to the model
"""

from mnemo_client._core import MnemoError
from mnemo_client.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client", "MnemoError"]
