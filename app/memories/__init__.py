"""Long-term memory, the pure part: lexical terms and BM25, chunking, fusion, the
retrieval gate, promotion decisions, dates, vector arithmetic.

No SQL and no I/O here: the embedders are adapters (``app/providers/embed.py``), the
memory table is ``app/stores/memories.py``, and the jobs and search that use them are
``app/services/memory_jobs.py`` and ``app/services/memories.py``.
"""
