"""Initial schema: users, sessions, turns (the archive), task state, compression events, jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def _ts(name: str, *, nullable: bool = False, default: bool = True) -> sa.Column:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=NOW if default else None,
    )


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")

    op.create_table(
        "users",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("external_id", sa.Text, nullable=False),
        _ts("created_at"),
        sa.UniqueConstraint("tenant_id", "external_id", name="users_tenant_external_key"),
    )

    op.create_table(
        "sessions",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("external_id", sa.Text, nullable=False),
        sa.Column(
            "user_id", sa.BigInteger, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        _ts("created_at"),
        _ts("updated_at"),
        sa.Column("turn_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("history_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("total_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("compressions", sa.Integer, nullable=False, server_default="0"),
        _ts("last_compression_at", nullable=True, default=False),
        sa.UniqueConstraint("tenant_id", "external_id", name="sessions_tenant_external_key"),
    )
    op.create_index("sessions_user_idx", "sessions", ["user_id"])

    op.create_table(
        "turns",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "session_id",
            sa.BigInteger,
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("external_id", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("content", sa.Text),
        sa.Column("tool_calls", JSONB),
        sa.Column("tool_call_id", sa.Text),
        sa.Column("name", sa.Text),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("emphasized", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        _ts("created_at"),
        sa.Column("compacted", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("event_id", sa.BigInteger),
        sa.CheckConstraint(
            "role IN ('system', 'user', 'assistant', 'tool')", name="turns_role_check"
        ),
        sa.UniqueConstraint("session_id", "seq", name="turns_session_seq_key"),
        sa.UniqueConstraint("session_id", "external_id", name="turns_session_external_key"),
    )
    op.create_index(
        "turns_live_idx",
        "turns",
        ["session_id", sa.text("seq DESC")],
        postgresql_where=sa.text("NOT compacted"),
    )

    op.create_table(
        "task_states",
        sa.Column(
            "session_id",
            sa.BigInteger,
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("rendered", sa.Text, nullable=False, server_default=""),
        sa.Column("rendered_tokens", sa.Integer, nullable=False, server_default="0"),
        _ts("updated_at"),
    )

    op.create_table(
        "compression_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "session_id",
            sa.BigInteger,
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        _ts("created_at"),
        sa.Column("trigger", sa.Text, nullable=False),
        sa.Column("tier", sa.Integer, nullable=False),
        sa.Column("state_version", sa.Integer, nullable=False),
        sa.Column("turn_ids", JSONB, nullable=False),
        sa.Column("turn_seqs", JSONB, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("ratio", sa.Float, nullable=False),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("extractor", sa.Text, nullable=False),
        sa.Column("fallback_reason", sa.Text),
        sa.Column("units", JSONB, nullable=False),
        sa.Column("rendered_state", sa.Text, nullable=False),
        sa.Column("change_summary", sa.Text, nullable=False),
        sa.Column("job_id", sa.BigInteger),
    )
    op.create_index("compression_events_session_idx", "compression_events", ["session_id", "id"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("session_id", sa.BigInteger, sa.ForeignKey("sessions.id", ondelete="CASCADE")),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("status", sa.Text, nullable=False, server_default="queued"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        _ts("run_after"),
        _ts("locked_until", nullable=True, default=False),
        sa.Column("locked_by", sa.Text),
        sa.Column("last_error", sa.Text),
        _ts("created_at"),
        _ts("updated_at"),
        _ts("finished_at", nullable=True, default=False),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'done', 'dead')", name="jobs_status_check"
        ),
    )
    op.create_index(
        "jobs_runnable_idx",
        "jobs",
        ["run_after", "id"],
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.create_index(
        "jobs_lease_idx", "jobs", ["locked_until"], postgresql_where=sa.text("status = 'running'")
    )
    op.create_index(
        "jobs_one_queued_idx",
        "jobs",
        ["session_id", "kind"],
        unique=True,
        postgresql_where=sa.text("status = 'queued' AND session_id IS NOT NULL"),
    )
    op.create_index(
        "jobs_one_running_idx",
        "jobs",
        ["session_id", "kind"],
        unique=True,
        postgresql_where=sa.text("status = 'running' AND session_id IS NOT NULL"),
    )


def downgrade() -> None:
    for table in ("jobs", "compression_events", "task_states", "turns", "sessions", "users"):
        op.drop_table(table)
