#!/bin/sh
# A schedlab service client in plain shell: curl and jq, no Python.
#   examples/schedlab-client.sh ROUND.json [http://127.0.0.1:8080]
# A service started with --token-file wants a token: SCHEDLAB_TOKEN=... in the environment
# (it goes to curl in a header file, never on a command line other users can list).
# Prints one line per job (id, GPUs, batch) and exits 0; on a refused round prints every
# problem to stderr and exits 2 (400: the round's fault) or 1 (busy, too large, failed).
set -eu
round=${1:?usage: schedlab-client.sh ROUND.json [URL]}
url=${2:-http://127.0.0.1:8080}
body=$(mktemp)
headers=$(mktemp)
trap 'rm -f "$body" "$headers"' EXIT
printf 'Content-Type: application/json\n' >"$headers"
if [ -n "${SCHEDLAB_TOKEN:-}" ]; then
    printf 'Authorization: Bearer %s\n' "$SCHEDLAB_TOKEN" >>"$headers"
fi
code=$(curl -sS -o "$body" -w '%{http_code}' -H @"$headers" --data-binary @"$round" "$url/v1/solve")
if [ "$code" = 200 ]; then
    jq -r '"status \(.status)  objective \(.objective // "none")",
           (.allocations[] | "\(.job_id)\t\(.num_gpus) GPUs on \(.num_nodes) nodes\tbatch \(.total_bsz)")' "$body"
    exit 0
fi
jq -r '"schedlab: \(.error): " + (.problems | join("\n  "))' "$body" >&2
[ "$code" = 400 ] && exit 2
exit 1
