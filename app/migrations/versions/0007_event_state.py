"""What the inspector shows of each compression.

* ``compression_events.state``: the task state the compression committed (its
  version is ``state_version``), so a page can show the state before and after as
  a diff; older events have none and are shown as a diff of their renderings.
* ``compression_events.llm_prompt_tokens`` / ``llm_completion_tokens``: the tokens
  the LLM extractor's calls used (null when no LLM was called).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("compression_events", sa.Column("state", JSONB))
    op.add_column("compression_events", sa.Column("llm_prompt_tokens", sa.Integer))
    op.add_column("compression_events", sa.Column("llm_completion_tokens", sa.Integer))


def downgrade() -> None:
    op.drop_column("compression_events", "llm_completion_tokens")
    op.drop_column("compression_events", "llm_prompt_tokens")
    op.drop_column("compression_events", "state")
