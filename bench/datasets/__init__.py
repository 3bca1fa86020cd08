"""Public long-term-memory datasets (LoCoMo, LongMemEval) fed to Mnemo over HTTP.

``model`` is the dataset-neutral shape (users, sessions, turns, questions with
their evidence); ``locomo`` and ``longmemeval`` read the original files into it,
normalising the evidence and hiding every label; ``importer`` posts it to a
running service, resumably; ``baselines`` are BM25 and dense retrieval over the
raw turns; ``scoring`` turns ranked results into recall and answer presence;
``runner`` is the flow both command lines share (``bench.locomo``,
``bench.longmemeval``). To measure a change of the read path before landing it,
keep the imported database (``--keep-data``) and rerun against it with
``--no-baselines``: the import is resumed (nothing re-posted or re-indexed) and
the questions are asked of the changed code.
"""
