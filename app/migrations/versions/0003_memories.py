"""Long-term memory: memories and episodes in pgvector, lexical terms, TTL.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

DIM = 512
NOW = sa.text("now()")


def upgrade() -> None:
    op.add_column(
        "sessions", sa.Column("episode_seq", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column(
        "sessions", sa.Column("live_turns", sa.Integer, nullable=False, server_default="0")
    )
    op.execute(
        "UPDATE sessions s SET live_turns ="
        " (SELECT count(*) FROM turns t WHERE t.session_id = s.id AND NOT t.compacted)"
    )
    op.add_column("sessions", sa.Column("last_user_seq", sa.Integer))
    op.add_column(
        "sessions", sa.Column("promoted_seq", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column("sessions", sa.Column("last_user_embedding", Vector(DIM)))
    op.add_column("jobs", sa.Column("dedup_key", sa.Text))
    op.add_column("jobs", sa.Column("priority", sa.Integer, nullable=False, server_default="0"))
    op.drop_index("jobs_runnable_idx", table_name="jobs")
    op.create_index(
        "jobs_runnable_idx",
        "jobs",
        [sa.text("priority DESC"), "run_after", "id"],
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.create_index(
        "jobs_one_queued_key_idx",
        "jobs",
        ["dedup_key"],
        unique=True,
        postgresql_where=sa.text("status = 'queued' AND dedup_key IS NOT NULL"),
    )
    op.create_table(
        "memories",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column(
            "user_id", sa.BigInteger, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("text_key", sa.Text, nullable=False),
        sa.Column("pinned", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("source", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("session_id", sa.BigInteger, sa.ForeignKey("sessions.id", ondelete="CASCADE")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column(
            "last_confirmed_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW
        ),
        sa.Column("times_confirmed", sa.Integer, nullable=False, server_default="1"),
        sa.Column("ttl_days", sa.Integer),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("superseded_by", sa.BigInteger),
        sa.Column("superseded_at", sa.DateTime(timezone=True)),
        sa.Column("terms", ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'::text[]")),
        sa.Column("embedding", Vector(DIM)),
        sa.Column("embedding_model", sa.Text),
        sa.Column("embedding_dim", sa.Integer),
        sa.CheckConstraint(
            "kind IN ('preference', 'profile', 'rule', 'high_stakes', 'episode', 'fact')",
            name="memories_kind_check",
        ),
        sa.CheckConstraint("NOT pinned OR expires_at IS NULL", name="memories_pinned_never_expire"),
    )
    # Vectors inline in the row, not in TOAST: an exact scan of a user's rows would
    # otherwise read ~6 extra buffers per row (pgvector's troubleshooting advice).
    op.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE PLAIN")
    op.execute("ALTER TABLE sessions ALTER COLUMN last_user_embedding SET STORAGE PLAIN")
    op.create_index(
        "memories_user_live_idx",
        "memories",
        ["user_id", "kind"],
        postgresql_where=sa.text("superseded_by IS NULL"),
    )
    op.create_index(
        "memories_embedding_hnsw_idx",
        "memories",
        ["embedding"],
        postgresql_using="hnsw",
        postgresql_ops={"embedding": "vector_cosine_ops"},
    )
    op.create_index("memories_terms_idx", "memories", ["terms"], postgresql_using="gin")
    op.create_index(
        "memories_expiry_idx",
        "memories",
        ["expires_at"],
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_index(
        "memories_session_idx",
        "memories",
        ["session_id"],
        postgresql_where=sa.text("session_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("memories")
    op.drop_index("jobs_one_queued_key_idx", table_name="jobs")
    op.drop_index("jobs_runnable_idx", table_name="jobs")
    op.create_index(
        "jobs_runnable_idx",
        "jobs",
        ["run_after", "id"],
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.drop_column("jobs", "priority")
    op.drop_column("jobs", "dedup_key")
    for column in (
        "last_user_embedding",
        "promoted_seq",
        "last_user_seq",
        "live_turns",
        "episode_seq",
    ):
        op.drop_column("sessions", column)
