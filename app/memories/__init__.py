"""Long-term memory: embedding, lexical terms, fusion, gating, chunking, promotion.

Everything here is pure except the embedders, which are adapters (a local model
in a worker thread, or an OpenAI-compatible endpoint over a passed-in client).
"""
