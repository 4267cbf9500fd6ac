#!/usr/bin/env bash
# Make a Debian base image for docker/Dockerfile.cpu (and tests/docker/postgres.Dockerfile) from Debian's package
# registry alone, for a machine that cannot pull from Docker Hub:
#
#   sudo docker/debian_base.sh [TAG] [CA_BUNDLE]
#   BASE_IMAGE=TAG docker compose -p mutransfer -f docker/compose.yaml up -d --build
#
# TAG defaults to mutransfer-base:bookworm. CA_BUNDLE (optional): a PEM file copied into the image and named by
# PIP_CERT/SSL_CERT_FILE/REQUESTS_CA_BUNDLE, for a network that re-signs TLS with its own authority.
# Needs root, debootstrap (apt-get install debootstrap) and a Docker engine.
set -euo pipefail
tag=${1:-mutransfer-base:bookworm}
ca=${2:-}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >/dev/null
changes=()
if [ -n "$ca" ]; then
    cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
    bundle=/etc/ssl/certs/ca-certificates.crt
    changes=(-c "ENV PIP_CERT=$bundle SSL_CERT_FILE=$bundle REQUESTS_CA_BUNDLE=$bundle")
fi
tar -C "$root" -c . | docker import "${changes[@]}" - "$tag" >/dev/null
echo "$tag"
