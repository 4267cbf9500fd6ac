# A stand-in for the public postgres image, for machines that reach Debian's package registry but not Docker Hub:
# Debian's PostgreSQL on any Debian base, honouring what docker/compose.yaml uses of the official image
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, the data folder /var/lib/postgresql/data, port 5432, pg_isready).
# Built by tests/test_docker.py when MUTRANSFER_DOCKER_BASE_IMAGE names a base.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \
    && rm -rf /var/lib/apt/lists/*
COPY tests/docker/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PGDATA=/var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["sh", "/usr/local/bin/postgres-entrypoint.sh"]
