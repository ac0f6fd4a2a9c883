#!/bin/sh
# Installs AgentWolf from a wheel into a fresh virtual environment and checks that `wolf` runs: the
# image's install step (deploy/Dockerfile runs it), kept as a script so tests/test_deploy.py runs the
# same steps against a wheel built from the tree.
#
#   deploy/image/build.sh WHEEL_DIR [PREFIX]
#
# WHEEL_DIR holds agentwolf-*.whl (`pip wheel --no-deps -w WHEEL_DIR .`) and any plugin wheels the
# fleet needs; PREFIX is the environment to create (default /opt/agentwolf). AGENTWOLF_EXTRAS names
# the extras (default: serve,a2a,otel,s3: `wolf serve` with A2A, traces, an S3 payload store); add
# gcs for a Cloud Storage bucket, acp for ACP agents. AGENTWOLF_PACKAGES names more requirements
# to install beside it: the stdio MCP servers the fleet's manifests run (default: none). pip's own
# settings apply (PIP_CONSTRAINT, PIP_NO_CACHE_DIR, PIP_INDEX_URL).
set -eu

wheels=${1:?usage: build.sh WHEEL_DIR [PREFIX]}
prefix=${2:-/opt/agentwolf}
extras=${AGENTWOLF_EXTRAS-serve,a2a,otel,s3}
packages=${AGENTWOLF_PACKAGES-}
python=${PYTHON:-python3}

set -- "$wheels"/agentwolf-*.whl
[ -f "$1" ] && [ $# -eq 1 ] || { echo "build.sh: want exactly one agentwolf-*.whl in $wheels" >&2; exit 2; }
wheel=$1

"$python" -m venv "$prefix"
# The wheel by its path, so no newer agentwolf from an index can take its place; the folder for
# plugin wheels beside it. $packages is split into words on purpose.
# shellcheck disable=SC2086
"$prefix/bin/python" -m pip install --quiet --disable-pip-version-check --find-links "$wheels" \
    "$wheel${extras:+[$extras]}" $packages
"$prefix/bin/wolf" --version
