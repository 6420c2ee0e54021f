#!/usr/bin/env bash
# Makes the venv that holds the peer routers (vllm-router, sglang-router) for the benchmark
# harness: .venv/peers by default, built from bench/peers/requirements.txt, wheels checked by
# sha256. The venv keeps the sha256 of the requirements it was built from and is rebuilt only
# when they change, so calling this again costs a few milliseconds. inferrail-bench calls it
# before the first run whose policy is peer:…; `make peers` calls it too.
#
# Usage: bench/peers/venv.sh [VENV]
# Environment: PYTHON (default python3, CPython 3.11 to 3.13).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:-$root/.venv/peers}
req=$here/requirements.txt
py=$venv/bin/python

want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ "$(cat "$venv/requirements.sha256" 2>/dev/null)" == "$want" ]] && "$py" -c '' 2>/dev/null; then
	exit 0
fi
started=$SECONDS
echo "peers: creating $venv" >&2
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$py" -m pip install --quiet --disable-pip-version-check --no-input \
	--require-hashes --no-deps --only-binary=:all: -r "$req" >&2
echo "$want" >"$venv/requirements.sha256"
echo "peers: $venv ready in $((SECONDS - started)) s" >&2
