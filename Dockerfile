# syntax=docker/dockerfile:1
# Specway's image: `docker build -t specway .` (docs/deployment.md). Two stages: the build stage installs the project
# and its dependencies into a virtual environment; the image copies only that environment onto the same slim base,
# and runs it as a user without privileges.
#
# Build-time access to a package index (a private index, a proxy, a company's certificate authority) is passed in as
# secrets, used by the one RUN that installs, and never written into a layer:
#   docker build --secret id=pip.conf,src=$HOME/.config/pip/pip.conf --secret id=ca.pem,src=/etc/ssl/certs/ca.pem .
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
WORKDIR /src
RUN python3 -m venv /opt/specway
COPY pyproject.toml README.md ./
COPY generated/ generated/
COPY generator/ generator/
COPY handlers/ handlers/
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=ca.pem \
    if [ -f /run/secrets/pip.conf ]; then export PIP_CONFIG_FILE=/run/secrets/pip.conf; fi; \
    if [ -f /run/secrets/ca.pem ]; then export PIP_CERT=/run/secrets/ca.pem; fi; \
    /opt/specway/bin/pip install --no-cache-dir --disable-pip-version-check --quiet '.[otel]' \
    && /opt/specway/bin/specway --version

FROM ${BASE}
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="specway" \
      org.opencontainers.image.description="A self-hostable LLM API gateway" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 10001 specway \
    && useradd --uid 10001 --gid 10001 --no-log-init --home-dir /var/lib/specway --create-home \
       --shell /usr/sbin/nologin specway
COPY --from=build /opt/specway /opt/specway
COPY deploy/container/specway.yaml /etc/specway/specway.yaml
# The configuration: the file above (mount yours over it, or name another with SPECWAY_CONFIG), and any key from the
# environment over it (SPECWAY_STORE__URL=postgresql://..., SPECWAY_LIMITS__REDIS_URL=redis://...).
ENV PATH=/opt/specway/bin:$PATH \
    SPECWAY_CONFIG=/etc/specway/specway.yaml \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER specway
WORKDIR /var/lib/specway
VOLUME ["/var/lib/specway"]
EXPOSE 8080
# SIGTERM (docker stop, Kubernetes) drains: no new connections, requests and streams in flight finish for up to
# server.drain_seconds (30), then spend and decision records are written. Give the stop more than that (35 s).
STOPSIGNAL SIGTERM
# The check reads the port from SPECWAY_SERVER__PORT (8080 otherwise): set the port that way, not in the file.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('SPECWAY_SERVER__PORT', '8080'), timeout=4)"]
ENTRYPOINT ["specway"]
CMD ["serve"]
