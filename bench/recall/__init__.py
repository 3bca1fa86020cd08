"""Recall of planted facts through compression, against the real service.

    python -m bench.recall --out recall.json [--sessions N --turns T --min-turns M
                                              --budget 2500 --seed S --window 8192
                                              --llm-base-url URL --llm-model M
                                              --plot FILE.png --concurrency C]

Generates long agent sessions (``bench/sessions.py``: English and Chinese, tool
calls with long JSON results, failures, chit-chat, changed parameters,
unanswered confirmations…, each with its ground truth), starts ``mnemo serve``
on a fresh embedded Postgres, and posts every session message by message as an
agent would, waiting for the compression a post schedules. Every 10 turns it
records the context size at ``--budget``; at the end it judges the context:

* planted-item recall by type — from the task state (the system message) by
  its markers ("Done …", "Pending: …", "- name: value (was …)"), or from the
  raw recent turns the context still carries;
* noise leaked — chit-chat found in the state, and anywhere in the context;
* tokens — context vs the full history, never above the budget, flat with length;
* consistency across compressions — between consecutive events' rendered
  states: constraints or pinned facts lost, a parameter's value changed with
  no turn saying so, a pending confirmation gone without an answer;
* compression time — the events' ``duration_ms``, and in-process: rule
  extraction + merge + render of a ~16k-token history (median of runs).

The same figures are computed for two baselines on the same sessions, without
the compressor: the full history, and truncation to the budget (the newest
turns that fit, a tool call never split from its results).

Modules: ``driver`` posts the sessions and collects contexts and events; ``judge``
scores one context (``rendered`` reads the task state with the compressor's own
labels; ``baselines`` builds the full-history and truncation contexts); ``stats``
pools the figures; ``timing`` times the compressor in-process; ``report`` and
``plot`` show the result; ``__main__`` is the command line.
"""
