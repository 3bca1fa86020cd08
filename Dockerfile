# syntax=docker/dockerfile:1
#
# Mnemo API / worker image.
#
#   docker build -t mnemo .
#   docker run --rm -e MNEMO_DATABASE_URL=postgresql://user:pass@host:5432/mnemo mnemo mnemo migrate
#   docker run -p 127.0.0.1:8000:8000 -e MNEMO_DATABASE_URL=postgresql://… mnemo
#
# In production MNEMO_DATABASE_URL is required: a Postgres with the pgvector extension.
# `mnemo serve` never migrates a configured database; run `mnemo migrate` as its own
# deployment step first (docker-compose.yml does, as the one-shot `migrate` service),
# or /readyz answers 503 "run `mnemo migrate`". Without MNEMO_DATABASE_URL the server
# starts an embedded Postgres in MNEMO_DATA_DIR inside the container: for a quick try
# only (one container, data lost with it unless /var/lib/mnemo is a volume).
#
# The image binds 0.0.0.0, and `mnemo serve` refuses a non-loopback address while the
# database holds no API key. First run: give it an admin key to install,
#   KEY=$(docker run --rm mnemo mnemo keys generate)       # prints a key, stores nothing
#   docker run -p 127.0.0.1:8000:8000 -e MNEMO_BOOTSTRAP_KEY="$KEY" mnemo
# (or MNEMO_BOOTSTRAP_KEY_FILE=/run/secrets/…). It is installed, as tenant
# MNEMO_BOOTSTRAP_TENANT (default `default`), only while the database never had a key.
# MNEMO_INSECURE_ALLOW_NO_KEYS=true starts without keys, unsafely.
#
# The same image runs `mnemo worker` (set MNEMO_EMBEDDED_WORKER=false on the API then).

ARG PYTHON_VERSION=3.11

# ---------------------------------------------------------------- builder
FROM python:${PYTHON_VERSION}-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /build
# Only what the wheel is built from: the package (with its tokenizer table in
# app/data and its migrations in app/migrations) and the metadata.
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --upgrade pip setuptools wheel \
 && pip install . \
 && cd / && python -c "import app.core.tokens as t; assert t.count_tokens('hello world') == 2" \
 && python -c "from app.stores.migrate import head_revision; assert head_revision()"

# ---------------------------------------------------------------- runtime
FROM python:${PYTHON_VERSION}-slim AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MNEMO_DATA_DIR=/var/lib/mnemo

RUN groupadd --system --gid 10001 mnemo \
 && useradd --system --uid 10001 --gid mnemo --home-dir /srv/mnemo --no-create-home \
            --shell /usr/sbin/nologin mnemo \
 && mkdir -p /srv/mnemo /var/lib/mnemo \
 && chown mnemo:mnemo /var/lib/mnemo

COPY --from=builder /opt/venv /opt/venv

# Migrations ship inside the package (app/migrations): nothing else to copy.
WORKDIR /srv/mnemo

USER mnemo:mnemo
EXPOSE 8000

# Liveness only (no database): slim has no curl, so Python asks /healthz.
# docker-compose.yml checks /readyz for the API and turns this off for the worker.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"]

CMD ["mnemo", "serve", "--host", "0.0.0.0", "--port", "8000"]
