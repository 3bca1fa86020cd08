"""Settings, read from the environment (prefix ``MNEMO_``) and an optional ``.env``.

Built once in the app factory or CLI, never at import time. Every field is
documented in ``.env.example`` and the README's configuration table.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EmbedderKind = Literal["use", "openai", "hash", "none"]
# The levels both `logging` and uvicorn know; given in any case.
LogLevel = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MNEMO_", env_file=".env", extra="ignore")

    # Storage
    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql://… of a Postgres with pgvector. Unset: embedded Postgres.",
    )
    data_dir: Path = Field(default=Path(".mnemo"), description="Where the embedded Postgres lives.")
    db_pool_size: int = Field(default=10, ge=1, le=200)

    # HTTP
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    keep_alive_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description=(
            "`mnemo serve` closes a keep-alive connection idle this long. Longer than the"
            " idle expiry of common clients and proxies (httpx 5 s, Node 5 s, AWS ALB 60 s,"
            " Go 90 s): at equal timeouts a client reuses the connection as the server closes"
            " it, and the request fails."
        ),
    )
    insecure_allow_no_keys: bool = Field(
        default=False,
        description="Let `mnemo serve` bind a non-loopback address with no API keys (unsafe).",
    )
    bootstrap_key: SecretStr | None = Field(
        default=None,
        description="An admin key (`mnemo keys generate`) installed when no key ever existed.",
    )
    bootstrap_key_file: Path | None = Field(
        default=None, description="A file holding that key (a Docker/Kubernetes secret)."
    )
    bootstrap_tenant: str = Field(default="default", description="The tenant of that key.")
    embedded_worker: bool = Field(
        default=True, description="`mnemo serve` runs the job worker (false: run `mnemo worker`)."
    )
    worker_process: bool = Field(
        default=True,
        description="`mnemo serve` runs that job worker as a child process of its own, so"
        " embedding and compression never hold the API process's CPU (false: inside it).",
    )
    worker_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="The niceness of that child process: on a busy machine the API is served"
        " first, and the jobs take the CPU it leaves (0: equal footing).",
    )
    worker_idle: bool = Field(
        default=True,
        description="That child process, every thread of it, runs at Linux's SCHED_IDLE"
        " priority: only on CPU time no other process wants (false: its niceness alone).",
    )
    worker_lag_limit_s: float = Field(
        default=60.0,
        ge=0,
        description="When a due job has waited longer than this, `mnemo serve` restarts its"
        " idle-class job worker at its niceness alone (never starved), and idle-class again"
        " once no due job has waited more than a quarter of it (0: never, whatever the units"
        " limit).",
    )
    worker_units_lag_limit_s: float = Field(
        default=0.0,
        ge=0,
        description="When a units job (what a bulk post's user turns state, read before"
        " their first context read) has waited longer than this, `mnemo serve` switches its"
        " idle-class job worker to one at MNEMO_WORKER_UNITS_NICE until no units job is left,"
        " a spare started beside it (0, the default: they wait MNEMO_WORKER_LAG_LIMIT_S"
        " like any other job, and no spare is kept; 2 s is the tested setting, see"
        " docs/operations.md).",
    )
    worker_units_nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="The niceness of the job worker while it stores the units of a bulk"
        " post: the API's own by default (it is read-path work: until it is done, each API"
        " process does it on its event loop, at the API's priority).",
    )

    # Context assembly
    context_max_tokens: int = Field(default=2500, ge=64, le=1_000_000)
    working_window_turns: int = Field(default=3, ge=1, le=100)
    change_notice: bool = Field(
        default=True,
        description="After a compression, show its change summary as one line in the"
        " task-state block until the next user turn.",
    )

    # Model window, from which the compression threshold is derived:
    # history budget = window - system - tools - reserved output.
    model_window_tokens: int = Field(default=8192, ge=1024)
    system_prompt_tokens: int = Field(default=1000, ge=0)
    tool_schema_tokens: int = Field(default=500, ge=0)
    reserved_output_tokens: int = Field(default=1000, ge=0)
    trigger_ratio: float = Field(default=0.8, gt=0, le=1)
    min_turns_before_compression: int = Field(default=8, ge=1)
    tool_failure_threshold: int = Field(default=3, ge=1)
    decay_factor: float = Field(default=0.95, gt=0, le=1)
    semantic_threshold: float = Field(default=0.82, gt=0, le=1)
    # Tools the deployment declares as changing the world (always listed with their
    # ids and outcome) or as read-only (grouped with a count); comma-separated names.
    # Undeclared tools are judged by their name's verb and their result.
    write_tools: str = Field(default="", max_length=10_000)
    read_tools: str = Field(default="", max_length=10_000)

    # Request limits (reported in errors)
    max_messages_per_request: int = Field(default=500, ge=1)
    max_content_chars: int = Field(default=200_000, ge=1)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)

    # Job queue
    job_poll_interval_s: float = Field(default=1.0, gt=0)
    # A batched kind of job (embedding memories) is run this long after the write that
    # woke the worker, and again after its claim: the jobs queued meanwhile join it.
    job_batch_wait_s: float = Field(default=0.05, ge=0, le=10)
    job_lease_s: float = Field(default=60.0, gt=0)
    job_aging_s: float = Field(
        default=60.0,
        ge=0,
        description="A job due for longer than this is claimed before every job due for less,"
        " whatever its kind: background work (indexing, promotion) waits about this long"
        " behind a stream of compressions that keeps up (0: off, the kind's priority alone).",
    )
    worker_stop_grace_s: float = Field(
        default=5.0,
        ge=0,
        description="A stopping job worker (SIGTERM) lets its running jobs finish for this"
        " long, then stops them and hands every job it holds back to the queue, claimable at"
        " once by another worker (an idle-class worker hands them back at once).",
    )
    job_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="A job running longer than this is stopped (its transaction rolls back)"
        " and counts as a failed attempt, retried with backoff like any failure: a handler"
        " that hangs frees its worker's slot and runs out of attempts.",
    )
    job_max_attempts: int = Field(default=5, ge=1)
    job_backoff_base_s: float = Field(default=2.0, gt=0)
    job_backoff_max_s: float = Field(default=300.0, gt=0)
    # Finished jobs are deleted this long after they finished (each worker prunes every
    # job_prune_interval_s); dead jobs are kept until requeued or pruned by hand.
    job_retention_days: float = Field(default=7.0, gt=0)
    job_prune_interval_s: float = Field(default=3600.0, gt=0)
    worker_metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="`mnemo worker` serves /metrics on this port (unset: no metrics server).",
    )
    worker_metrics_host: str = Field(
        default="0.0.0.0",  # a scrape target; `mnemo serve` binds its own worker's to loopback
        description="The address that metrics server binds.",
    )
    worker_metrics_url: str | None = Field(
        default=None,
        description="The API's /metrics adds the job worker's counters read from this URL"
        " at each scrape (when no worker_metrics_file is set).",
    )
    worker_metrics_file: Path | None = Field(
        default=None,
        description="The job worker publishes its counters to this file (twice a second,"
        " when they changed) and the API's /metrics adds them: `mnemo serve` sets it for the"
        " worker it starts (a scrape neither parses text nor asks the worker).",
    )
    worker_concurrency: int = Field(default=2, ge=1, le=64)
    # The rule extractor runs in a child process; past this it is killed and the
    # compression keeps no units from those turns (the event says why).
    extraction_deadline_s: float = Field(default=10.0, gt=0, le=600)

    # LLM extractor (OpenAI-compatible). Unset base URL: the rule extractor is used.
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = Field(default=30.0, gt=0)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    outbound_http: Literal["keepalive", "httpx"] = Field(
        default="keepalive",
        description="Transport of the outbound calls (embedding API, LLM): keepalive"
        " (app/providers/http11.py: HTTP/1.1 keep-alive, httptools' parser; ~0.5 ms less"
        " CPU a call) or httpx (httpx's own transport, for an endpoint the first one does"
        " not serve well). A proxy from the environment always uses httpx's.",
    )

    # Long-term memory
    embedder: EmbedderKind = Field(
        default="use",
        description="use (multilingual USE, offline) | openai (an /embeddings API at"
        " embedding_base_url, 512-d) | hash (lexical, tests) | none (no long-term memory)",
    )
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_model: str = "text-embedding-3-small"
    query_cache_size: int = Field(
        default=1024,
        ge=0,
        le=1_000_000,
        description="Query vectors kept per process: a repeated query skips its embedding."
        " 0 keeps none (a benchmark whose queries repeat measures every embedding).",
    )
    index_delay_s: float = Field(
        default=2.0,
        ge=0,
        description="Episode indexing waits this long after a post, so a burst of posts"
        " to one session is indexed by one job.",
    )
    memory_ttl_days: int = Field(default=90, ge=1, le=36500)
    memory_budget_tokens: int = Field(
        default=1500,
        ge=0,
        le=100_000,
        description="The memory block's share of a context whose query is the latest user"
        " turn (at most half of what the state and the working window leave); with an"
        " explicit query the block may use all of it.",
    )
    memory_top_k: int = Field(
        default=3,
        ge=0,
        le=50,
        description="The fewest search candidates; larger memory budgets ask for more.",
    )
    memory_sweep_interval_s: float = Field(default=300.0, gt=0)
    restatement_threshold: float = Field(default=0.85, gt=0, le=1)

    # Logging
    log_level: LogLevel = "INFO"
    log_json: bool = Field(default=True, description="One JSON object per log line.")
    # OpenTelemetry spans (the `otel` extra), exported as the OTEL_* variables say.
    tracing: bool = False

    @property
    def history_budget_tokens(self) -> int:
        return max(
            256,
            self.model_window_tokens
            - self.system_prompt_tokens
            - self.tool_schema_tokens
            - self.reserved_output_tokens,
        )

    def initial_key(self) -> str | None:
        """The bootstrap admin key, from MNEMO_BOOTSTRAP_KEY or the file it names."""
        key = ""
        if self.bootstrap_key is not None:
            key = self.bootstrap_key.get_secret_value()
        elif self.bootstrap_key_file is not None:
            key = self.bootstrap_key_file.read_text()
        return key.strip() or None  # an empty variable (compose's ${X:-}) is no key

    def tool_kinds(self) -> dict[str, Literal["read", "write"]]:
        kinds: dict[str, Literal["read", "write"]] = {}
        for name in self.read_tools.split(","):
            if name.strip():
                kinds[name.strip()] = "read"
        for name in self.write_tools.split(","):
            if name.strip():
                kinds[name.strip()] = "write"
        return kinds

    @property
    def async_database_url(self) -> str | None:
        """The configured database (None: embedded), pinned to asyncpg."""
        url = reveal(self.database_url)
        return to_asyncpg_url(url) if url else None

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_case_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_budget(self) -> Settings:
        spent = self.system_prompt_tokens + self.tool_schema_tokens + self.reserved_output_tokens
        if spent >= self.model_window_tokens:
            raise ValueError(
                "model_window_tokens must exceed system_prompt_tokens + tool_schema_tokens"
                " + reserved_output_tokens"
            )
        return self


def reveal(secret: SecretStr | None) -> str | None:
    """A secret's value where it is handed to a driver or client (never logged)."""
    return secret.get_secret_value() if secret is not None else None


def to_asyncpg_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and pin SQLAlchemy to asyncpg."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {url.split('://')[0]}://…")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
