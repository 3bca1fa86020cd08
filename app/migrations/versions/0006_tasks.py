"""Tasks shared by sessions, agent-bound keys, and misses.

* ``tasks``: a client-named task of a tenant; its shared state (merged from the
  contributions of its sessions, with the task clock and credits) and that state
  rendered at shrinking budgets, so /context only reads.
* ``task_members``: per task, an agent's role (reader | contributor) and the
  shared sections a contributor writes (null: all).
* ``task_events``: one row per contribution to the shared state (the audit).
* ``sessions.task_id`` (one task per session) and ``sessions.agent`` (the agent a
  session belongs to); ``api_keys.agent``: a key bound to an agent name.
* ``misses``: what an agent needed that compression had taken away: the request,
  how it was detected, the turns restored, the state at the time (the sample).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("external_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("rendered", sa.Text, nullable=False, server_default=""),
        sa.Column("renderings", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.UniqueConstraint("tenant_id", "external_id", name="tasks_tenant_external_key"),
    )
    op.create_table(
        "task_members",
        sa.Column(
            "task_id", sa.BigInteger, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("sections", ARRAY(sa.Text)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("task_id", "agent"),
        sa.CheckConstraint("role IN ('reader', 'contributor')", name="task_members_role_check"),
    )
    op.create_table(
        "task_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "task_id", sa.BigInteger, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("session_id", sa.BigInteger, sa.ForeignKey("sessions.id", ondelete="SET NULL")),
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("units", sa.Integer, nullable=False),
        sa.Column("change_summary", sa.Text, nullable=False),
        sa.Column("compression_event_id", sa.BigInteger),
    )
    op.create_index("task_events_task_idx", "task_events", ["task_id", "id"])
    op.add_column(
        "sessions",
        sa.Column("task_id", sa.BigInteger, sa.ForeignKey("tasks.id", ondelete="SET NULL")),
    )
    op.add_column("sessions", sa.Column("agent", sa.Text))
    op.create_index(
        "sessions_task_idx",
        "sessions",
        ["task_id"],
        postgresql_where=sa.text("task_id IS NOT NULL"),
    )
    op.add_column("api_keys", sa.Column("agent", sa.Text))
    op.create_table(
        "misses",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column(
            "session_id",
            sa.BigInteger,
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("detection", sa.Text, nullable=False),
        sa.Column("needed", sa.Text, nullable=False),
        sa.Column("restored_seqs", JSONB, nullable=False),
        sa.Column("state", JSONB, nullable=False),
        sa.Column("turns", JSONB, nullable=False),
        sa.CheckConstraint(
            "detection IN ('explicit', 'reask', 'query')", name="misses_detection_check"
        ),
    )
    op.create_index("misses_session_idx", "misses", ["session_id", "id"])


def downgrade() -> None:
    op.drop_table("misses")
    op.drop_column("api_keys", "agent")
    op.drop_index("sessions_task_idx", table_name="sessions")
    op.drop_column("sessions", "agent")
    op.drop_column("sessions", "task_id")
    op.drop_table("task_events")
    op.drop_table("task_members")
    op.drop_table("tasks")
