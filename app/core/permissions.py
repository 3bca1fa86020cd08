"""Who may do what on a task. Pure: the rules, over plain values.

* An API key may be bound to an agent name. A bound key reaches only its own
  agent's sessions (another agent's session, its state, turns and events are
  404, as if they did not exist) and only tasks its agent is a member of.
  An unbound key (the orchestrator's) reaches every session of its tenant, and
  is the one that creates tasks and sets roles.
* Per task, an agent is a ``reader`` (sees the shared state, never writes it)
  or a ``contributor`` (its compressions write the shared sections it is given;
  all of them when none are named).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Role = Literal["reader", "contributor"]
# The sections of a task's shared state (``app.compression.shared``).
Section = Literal["goal", "constraints", "decisions", "actions", "pending", "artifacts"]
SECTIONS: tuple[Section, ...] = get_args(Section)


@dataclass(frozen=True)
class Membership:
    agent: str
    role: Role
    # The shared sections a contributor writes; None: all of them.
    sections: tuple[Section, ...] | None = None


def writable(member: Membership | None) -> tuple[Section, ...]:
    """The shared sections this member's compressions write (none for a reader)."""
    if member is None or member.role != "contributor":
        return ()
    return SECTIONS if member.sections is None else member.sections


def sees_session(key_agent: str | None, session_agent: str | None) -> bool:
    """Whether a key bound to ``key_agent`` (None: unbound) reaches a session."""
    return key_agent is None or key_agent == session_agent


def sees_task(key_agent: str | None, members: Iterable[str]) -> bool:
    """Whether a key reaches a task: unbound keys do; a bound one if its agent is a member."""
    return key_agent is None or key_agent in set(members)


def manages_tasks(key_agent: str | None) -> bool:
    """Creating a task and setting roles is the orchestrator's (an unbound key)."""
    return key_agent is None
