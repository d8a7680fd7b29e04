#!/usr/bin/env bash
# Start a run of a judgeflow deployment through Prefect's REST API: no Python, only curl and jq.
#
#   trigger_rest.sh [FLOW/DEPLOYMENT] [PARAMS_JSON] [IDEMPOTENCY_KEY]
#
#   PREFECT_API_URL=http://127.0.0.1:4200/api deployments/trigger_examples/trigger_rest.sh
#   deployments/trigger_examples/trigger_rest.sh regression/post-deploy-eval \
#       "$(cat params.json)" "deploy-$GIT_SHA"
#
# PARAMS_JSON is the flow's `params` object; it replaces the deployment's default `params` as a
# whole (Prefect merges one key deep), so give every field the flow needs. Empty or absent: no
# parameters are sent and the run takes the deployment's own defaults. The server checks them
# against the flow's parameter schema and refuses bad ones with HTTP 409 and the reason.
#
# A second request with the same IDEMPOTENCY_KEY returns the first one's flow run (HTTP 200
# instead of 201) instead of starting another: pass something that names the cause, e.g. the
# CI job or the model version. Without one, a key is made up once here, so that curl's own
# retries after a lost response cannot start the run twice.
#
# Prints the flow run id on stdout; exits 1 when the server refuses the run.
set -euo pipefail

api="${PREFECT_API_URL:-http://127.0.0.1:4200/api}"
deployment="${1:-evaluate/evaluate}"
params="${2:-}"
key="${3:-judgeflow-$(date -u +%Y%m%dT%H%M%SZ)-$RANDOM$RANDOM}"

curl_api() { curl --silent --show-error --retry 3 --retry-connrefused "$@"; }

deployment_id="$(curl_api --fail "$api/deployments/name/$deployment" | jq -er .id)"

if [[ -n "$params" ]]; then
    body="$(jq -n --argjson params "$params" --arg key "$key" \
        '{parameters: {params: $params}, idempotency_key: $key}')"
else
    body="$(jq -n --arg key "$key" '{idempotency_key: $key}')"
fi
response="$(curl_api -X POST "$api/deployments/$deployment_id/create_flow_run" \
    -H "Content-Type: application/json" -d "$body" -w $'\n%{http_code}')"
status="${response##*$'\n'}"
response="${response%$'\n'*}"

if [[ "$status" != 200 && "$status" != 201 ]]; then
    echo "run of $deployment refused (HTTP $status): $response" >&2
    exit 1
fi
echo "$response" | jq -r '"flow run \(.name) (\(.id)): \(.state.type)"' >&2
echo "$response" | jq -r .id
