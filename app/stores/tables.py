"""The schema as SQLAlchemy Core tables.

Migrations (``app/migrations/versions``) create it; a test checks that
``alembic upgrade head`` yields exactly these tables, columns and indexes.
Every row carries ``tenant_id`` (directly or through its session) so that every
query filters by tenant in SQL and tables can later be distributed by tenant.
"""

from __future__ import annotations

from pgvector.sqlalchemy import HALFVEC, Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData()

NOW = text("now()")
EMBEDDING_DIM = 512  # the default embedder's (USE multilingual v3); see docs/decisions/0002

users = Table(
    "users",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("external_id", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    UniqueConstraint("tenant_id", "external_id", name="users_tenant_external_key"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("external_id", Text, nullable=False),
    Column("user_id", BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # turn_count doubles as the seq allocator: seqs are turn_count+1 … under the row lock.
    Column("turn_count", Integer, nullable=False, server_default="0"),
    # Tokens of the turns not yet compacted: what the raw history would cost now.
    Column("history_tokens", BigInteger, nullable=False, server_default="0"),
    Column("total_tokens", BigInteger, nullable=False, server_default="0"),
    Column("compressions", Integer, nullable=False, server_default="0"),
    Column("last_compression_at", DateTime(timezone=True)),
    # Long-term memory bookkeeping: episodes cover turns up to episode_seq; the newest
    # user turn's embedding is kept so /context can reuse it instead of embedding.
    Column("episode_seq", Integer, nullable=False, server_default="0"),
    # Turns not yet compacted; kept here so ingest need not count them.
    Column("live_turns", Integer, nullable=False, server_default="0"),
    Column("last_user_seq", Integer),
    # Promotion has looked at the state's evidence up to this seq: an item is promoted
    # (or confirmed) again only when a later turn restates it.
    Column("promoted_seq", Integer, nullable=False, server_default="0"),
    Column("last_user_embedding", Vector(EMBEDDING_DIM)),
    # The task the session works on (one at most) and the agent it belongs to.
    Column("task_id", BigInteger, ForeignKey("tasks.id", ondelete="SET NULL")),
    Column("agent", Text),
    UniqueConstraint("tenant_id", "external_id", name="sessions_tenant_external_key"),
    Index("sessions_user_idx", "user_id"),
    Index("sessions_task_idx", "task_id", postgresql_where=text("task_id IS NOT NULL")),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("external_id", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("version", Integer, nullable=False, server_default="0"),
    # app.compression.shared.SharedState: the merged state, the task clock, the credits.
    Column("state", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Rendered by the compression that changed it, so /context only reads.
    Column("rendered", Text, nullable=False, server_default=""),
    Column("renderings", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    UniqueConstraint("tenant_id", "external_id", name="tasks_tenant_external_key"),
)

task_members = Table(
    "task_members",
    metadata,
    Column("task_id", BigInteger, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("agent", Text, primary_key=True),
    Column("role", Text, nullable=False),
    Column("sections", ARRAY(Text)),  # null: every shared section
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    CheckConstraint("role IN ('reader', 'contributor')", name="task_members_role_check"),
)

task_events = Table(
    "task_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("task_id", BigInteger, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("session_id", BigInteger, ForeignKey("sessions.id", ondelete="SET NULL")),
    Column("agent", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("version", Integer, nullable=False),
    Column("units", Integer, nullable=False),
    Column("change_summary", Text, nullable=False),
    Column("compression_event_id", BigInteger),
    Index("task_events_task_idx", "task_id", "id"),
)

misses = Table(
    "misses",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("session_id", BigInteger, ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("detection", Text, nullable=False),
    Column("needed", Text, nullable=False),
    Column("restored_seqs", JSONB, nullable=False),
    Column("state", JSONB, nullable=False),  # the state when the miss happened
    Column("turns", JSONB, nullable=False),  # the compacted turns restored from
    CheckConstraint("detection IN ('explicit', 'reask', 'query')", name="misses_detection_check"),
    Index("misses_session_idx", "session_id", "id"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("session_id", BigInteger, ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    # The client's message id, or a generated "t_…" one (clients cannot send "_").
    Column("external_id", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("content", Text),
    Column("tool_calls", JSONB),
    Column("tool_call_id", Text),
    Column("name", Text),
    Column("tokens", Integer, nullable=False),
    Column("emphasized", Boolean, nullable=False, server_default="false"),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("compacted", Boolean, nullable=False, server_default="false"),
    Column("event_id", BigInteger),
    # What a user turn states that the context read adds while the turn is live (the
    # kept units of ``live_notes.turn_units``), stored once by the worker when it
    # indexes the turn; NULL: not read yet (the read then reads the text itself).
    Column("units", JSONB),
    CheckConstraint("role IN ('system', 'user', 'assistant', 'tool')", name="turns_role_check"),
    UniqueConstraint("session_id", "seq", name="turns_session_seq_key"),
    UniqueConstraint("session_id", "external_id", name="turns_session_external_key"),
    # The context read: newest uncompacted turns of one session.
    Index(
        "turns_live_idx",
        "session_id",
        text("seq DESC"),
        postgresql_where=text("NOT compacted"),
    ),
)

task_states = Table(
    "task_states",
    metadata,
    Column(
        "session_id",
        BigInteger,
        ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("version", Integer, nullable=False, server_default="0"),
    Column("state", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Rendered once by the worker so that /context only reads.
    Column("rendered", Text, nullable=False, server_default=""),
    Column("rendered_tokens", Integer, nullable=False, server_default="0"),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # The change notice of the last compression and the session's last seq when it
    # committed: /context shows it until a user turn comes after that seq.
    Column("notice", Text),
    Column("notice_seq", Integer),
)

compression_events = Table(
    "compression_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("session_id", BigInteger, ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("trigger", Text, nullable=False),
    Column("tier", Integer, nullable=False),
    Column("state_version", Integer, nullable=False),
    Column("turn_ids", JSONB, nullable=False),
    Column("turn_seqs", JSONB, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("ratio", Float, nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("extractor", Text, nullable=False),
    Column("fallback_reason", Text),
    Column("units", JSONB, nullable=False),
    Column("rendered_state", Text, nullable=False),
    Column("change_summary", Text, nullable=False),
    Column("job_id", BigInteger),
    # The state this compression committed, for the inspector's before/after diff.
    Column("state", JSONB),
    # Tokens the LLM extractor's calls used (null: no LLM call).
    Column("llm_prompt_tokens", Integer),
    Column("llm_completion_tokens", Integer),
    Index("compression_events_session_idx", "session_id", "id"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("session_id", BigInteger, ForeignKey("sessions.id", ondelete="CASCADE")),
    Column("kind", Text, nullable=False),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("status", Text, nullable=False, server_default="queued"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("run_after", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("locked_until", DateTime(timezone=True)),
    Column("locked_by", Text),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("finished_at", DateTime(timezone=True)),
    # Jobs not tied to a session (a user's embeddings) dedup on this key instead.
    Column("dedup_key", Text),
    # Higher runs first: a compression must not wait behind a queue of embeddings.
    Column("priority", Integer, nullable=False, server_default="0"),
    CheckConstraint("status IN ('queued', 'running', 'done', 'dead')", name="jobs_status_check"),
    Index(
        "jobs_runnable_idx",
        text("priority DESC"),
        "run_after",
        "id",
        postgresql_where=text("status = 'queued'"),
    ),
    Index("jobs_lease_idx", "locked_until", postgresql_where=text("status = 'running'")),
    # At most one waiting and one running job of a kind per session: the queue
    # dedups repeated triggers, and a session is never compressed twice at once.
    Index(
        "jobs_one_queued_idx",
        "session_id",
        "kind",
        unique=True,
        postgresql_where=text("status = 'queued' AND session_id IS NOT NULL"),
    ),
    Index(
        "jobs_one_queued_key_idx",
        "dedup_key",
        unique=True,
        postgresql_where=text("status = 'queued' AND dedup_key IS NOT NULL"),
    ),
    Index(
        "jobs_one_running_idx",
        "session_id",
        "kind",
        unique=True,
        postgresql_where=text("status = 'running' AND session_id IS NOT NULL"),
    ),
)

# What a background sweep last finished for (the restamp sweep: the rules it stored the
# stale units records again by). Written by the sweep's last job; read at a worker's start.
sweeps = Table(
    "sweeps",
    metadata,
    Column("name", Text, primary_key=True),
    Column("stamp", Text, nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Text, primary_key=True),  # the public part of the key: "mk_<id>_…"
    Column("tenant_id", Text, nullable=False),
    Column("scope", Text, nullable=False),
    # sha256 of the whole key: keys are 256-bit random, so a slow KDF buys nothing.
    Column("key_hash", Text, nullable=False),
    Column("label", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("revoked_at", DateTime(timezone=True)),
    # A key bound to an agent name reaches only that agent's sessions and tasks.
    Column("agent", Text),
    CheckConstraint("scope IN ('agent', 'admin')", name="api_keys_scope_check"),
)

memories = Table(
    "memories",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("user_id", BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("text", Text, nullable=False),
    # Normalised text hash: a restatement in the same words is found without vectors.
    Column("text_key", Text, nullable=False),
    Column("pinned", Boolean, nullable=False, server_default="false"),
    Column("source", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Episodes belong to a session and go with it; curated memories outlive it.
    Column("session_id", BigInteger, ForeignKey("sessions.id", ondelete="CASCADE")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_confirmed_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("times_confirmed", Integer, nullable=False, server_default="1"),
    Column("ttl_days", Integer),
    Column("expires_at", DateTime(timezone=True)),
    Column("superseded_by", BigInteger),
    Column("superseded_at", DateTime(timezone=True)),
    Column("embedding", Vector(EMBEDDING_DIM)),
    Column("embedding_model", Text),
    Column("embedding_dim", Integer),
    # The seq of a single-turn memory (an index row of one turn of its session).
    Column("turn_seq", Integer),
    # In the HNSW index: a row of a user with more than EXACT_SCAN_MAX live memories,
    # the only users searched through it (stores/memories.FLIP_HEAVY, migration 0013).
    Column("ann", Boolean, nullable=False, server_default="false"),
    CheckConstraint(
        "kind IN ('preference', 'profile', 'rule', 'high_stakes', 'episode', 'fact')",
        name="memories_kind_check",
    ),
    CheckConstraint("NOT pinned OR expires_at IS NULL", name="memories_pinned_never_expire"),
    # Retrieval filters by user first: live memories of one user.
    Index(
        "memories_user_live_idx", "user_id", "kind", postgresql_where=text("superseded_by IS NULL")
    ),
    # An add's restatement look-up (ADD_MEMORY's ``existing``): one probe, not a scan.
    Index(
        "memories_user_text_key_idx",
        "user_id",
        "text_key",
        postgresql_where=text("superseded_by IS NULL"),
    ),
    # Whether a user is heavy already (has ``ann`` rows), and a heavy user's rows the
    # search ranks exactly (``NOT ann``).
    Index("memories_user_ann_idx", "user_id", "ann"),
    Index(
        "memories_embedding_hnsw_idx",
        "embedding",
        postgresql_using="hnsw",
        postgresql_ops={"embedding": "vector_cosine_ops"},
        postgresql_where=text("ann"),
    ),
    Index("memories_expiry_idx", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
    Index("memories_session_idx", "session_id", postgresql_where=text("session_id IS NOT NULL")),
    Index(
        "memories_turn_idx",
        "session_id",
        "turn_seq",
        postgresql_where=text("turn_seq IS NOT NULL"),
    ),
)

# The vectors of the memories again, at half precision and without the rest of the row,
# for the exact per-user search (stores/memories.VECTOR_ROUTED): a user's rows are read
# from ~1 KB rows, 7 to a page, instead of the memories' ~3 KB ones. Written by the
# statement that writes the memory's embedding, deleted with their memory.
memory_vectors = Table(
    "memory_vectors",
    metadata,
    Column(
        "memory_id",
        BigInteger,
        ForeignKey("memories.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("user_id", BigInteger, nullable=False),
    Column("kind", Text, nullable=False),
    Column("embedding", HALFVEC(EMBEDDING_DIM), nullable=False),
    Index("memory_vectors_user_idx", "user_id", "kind"),
)

# BM25 postings of the memories (app/memories/bm25.py, stores/memories.LEXICAL): read by
# (user_id, term) from the key's index alone (it carries kind, tf and dl), deleted with
# their memory.
memory_terms = Table(
    "memory_terms",
    metadata,
    Column("user_id", BigInteger, nullable=False),
    Column("term", Text, nullable=False),
    Column("memory_id", BigInteger, ForeignKey("memories.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("tf", Integer, nullable=False),
    Column("dl", Integer, nullable=False),
    PrimaryKeyConstraint(
        "user_id",
        "term",
        "memory_id",
        name="memory_terms_pkey",
        postgresql_include=["kind", "tf", "dl"],
    ),
    Index("memory_terms_memory_idx", "memory_id"),
)
