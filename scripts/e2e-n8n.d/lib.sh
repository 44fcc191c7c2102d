# Helpers of scripts/e2e-n8n: processes, HTTP calls, polling, the summary.
# Sourced; expects repo, here, work, bin, n8n_dir, n8n_scripts, OG, N8N, TARGET.
# shellcheck shell=bash

PASSED=() FAILED=() SKIPPED=()

say() { printf '%s\n' "e2e-n8n: $*"; }
step() { printf '\n== %s\n' "$*"; }
die() { printf '%s\n' "e2e-n8n: $*" >&2; exit 1; }
ok() { PASSED+=("$1"); printf '  PASS  %s%s\n' "$1" "${2:+ ($2)}"; }
bad() { FAILED+=("$1"); printf '  FAIL  %s: %s\n' "$1" "$2"; }
unavailable() { SKIPPED+=("$1"); printf '  SKIP  %s: not yet available (%s)\n' "$1" "$2"; }

# wait_until SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds.
wait_until() {
  local limit=$1 t0
  shift
  t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    [ $(($(date +%s) - t0)) -lt "$limit" ] || return 1
    sleep 0.2
  done
}

now() { date +%s.%N; }

# ---------------------------------------------------------------- processes

# new_token SUBJECT SCOPE: prints the token; appends its [[tokens]] entry to $cfg.
new_token() {
  local out
  out=$("$bin" token new --subject "$1" --scope "$2")
  sed -n '/^add to oncegate.toml/,$p' <<<"$out" | tail -n +2 >>"$cfg"
  sed -n '2p' <<<"$out"
}

write_config() {
  step "oncegate config (examples/n8n/oncegate.toml + generated tokens)"
  cfg=$work/oncegate.toml
  export STRIPE_WEBHOOK_SECRET=whsec_$(openssl rand -hex 24)
  export N8N_FORWARD_SECRET=$(openssl rand -hex 24)
  N8N_SIGNING_SECRET=whsec_$(openssl rand -base64 32)
  export N8N_SIGNING_SECRET
  export ONCEGATE_DATABASE_URL=sqlite://$work/oncegate.db
  ev=$work/events
  mkdir -p "$ev"
  # The output contract is commented out in the example until oncegate has
  # POST /v1/runs/output; use it whenever this binary accepts it.
  sed '/^# -- output contract/,/^$/ { /^# --/! s/^# // }' "$repo/examples/n8n/oncegate.toml" >"$cfg"
  if ! "$bin" --config "$cfg" config check >/dev/null 2>&1; then
    cp "$repo/examples/n8n/oncegate.toml" "$cfg"
  fi
  printf '\n# ---- added by scripts/e2e-n8n\n' >>"$cfg"
  WF_TOKEN=$(new_token n8n workflow)
  APPROVER_TOKEN=$(new_token ada approver)
  ADMIN_TOKEN=$(new_token e2e-operator admin)
  "$bin" --config "$cfg" config check
}

start_target() {
  python3 "$here/target.py" --port 8099 >"$work/target.log" 2>&1 &
  target_pid=$!
  wait_until 15 curl -sf "$TARGET/healthz" || die "the counting target did not start (see $work/target.log)"
  say "counting target on $TARGET (pid $target_pid)"
}

start_oncegate() {
  "$bin" --config "$cfg" serve >"$work/oncegate.log" 2>&1 &
  og_pid=$!
  wait_until 30 curl -sf "$OG/readyz" || die "oncegate did not start; tail of $work/oncegate.log: $(tail -5 "$work/oncegate.log")"
  say "oncegate on $OG (pid $og_pid, database $ONCEGATE_DATABASE_URL)"
}

# The n8n CLI with start.sh's state folder, for importing credentials.
n8n_cli() {
  local nodehome
  nodehome=$(ls -d "$n8n_dir"/runtime/node_modules/node-linux-* | head -1)
  PATH=$nodehome/bin:$PATH N8N_USER_FOLDER=$work/n8n/home DB_TYPE=sqlite \
    N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false N8N_DIAGNOSTICS_ENABLED=false \
    node "$n8n_dir/app/node_modules/n8n/bin/n8n" "$@"
}

# n8n runs from $work/n8n (runtime and app linked from the install), so every
# run starts with an empty n8n database: only these workflows, fresh executions.
# Variant nodes: examples/n8n with the packed community nodes installed the
# way a self-hosted user installs them (npm install of the tarball in
# <user folder>/.n8n/nodes); variant http: examples/n8n/http-request.
start_n8n() {
  step "n8n with the $variant examples ($wfsrc)"
  mkdir -p "$work/n8n/home/.n8n/nodes" "$work/workflows"
  ln -s "$n8n_dir/runtime" "$work/n8n/runtime"
  ln -s "$n8n_dir/app" "$work/n8n/app"
  cp "$wfsrc"/*.json "$here/baseline-direct.json" "$here/baseline-pg-gate.json" "$work/workflows/"
  local creds
  creds=$(jq -n --arg token "Bearer $WF_TOKEN" --arg secret "$N8N_FORWARD_SECRET" '[
    {id: "ogWorkflowToken1", name: "oncegate workflow token", type: "httpHeaderAuth",
     data: {name: "Authorization", value: $token}},
    {id: "ogForwardSecret1", name: "oncegate forward secret", type: "httpHeaderAuth",
     data: {name: "X-Oncegate-Secret", value: $secret}}]')
  if [ "$variant" = nodes ]; then
    install_nodes
    creds=$(jq --arg token "$WF_TOKEN" --arg signing "$N8N_SIGNING_SECRET" --arg og "$OG" '. + [
      {id: "ogApiCredential", name: "oncegate API", type: "oncegateApi", data: {baseUrl: $og, token: $token}},
      {id: "ogSigningSecret", name: "oncegate signing secret", type: "oncegateSigningApi", data: {secrets: $signing}}]' <<<"$creds")
  fi
  if baseline_db; then
    creds=$(jq --arg db "$pg_db" '. + [{id: "ogBaselinePg001", name: "baseline postgres", type: "postgres",
      data: {host: "127.0.0.1", port: 5432, database: $db, user: "postgres", password: "", ssl: "disable"}}]' <<<"$creds")
  fi
  printf '%s\n' "$creds" >"$work/credentials.json"
  n8n_cli import:credentials --input="$work/credentials.json" >"$work/n8n-credentials.log" 2>&1 \
    || die "importing credentials failed: $(tail -5 "$work/n8n-credentials.log")"
  rm -f "$work/credentials.json"
  n8n_start
}

# The packed nodes (scripts/build-n8n-nodes, or $N8N_NODES_TGZ), installed with
# n8n's own Node and npm; n8n-workflow is n8n's, so peers are left out.
install_nodes() {
  local tgz=${N8N_NODES_TGZ:-} nodehome
  if [ -z "$tgz" ]; then
    tgz=$("$repo/scripts/build-n8n-nodes" "$work/pack" 2>"$work/build-n8n-nodes.log" | tail -1) \
      || die "scripts/build-n8n-nodes failed: $(tail -20 "$work/build-n8n-nodes.log")"
  fi
  [ -f "$tgz" ] || die "no node package at $tgz"
  nodehome=$(ls -d "$n8n_dir"/runtime/node_modules/node-linux-* | head -1)
  (cd "$work/n8n/home/.n8n/nodes" && printf '{"name":"installed-nodes","private":true}\n' >package.json \
    && PATH=$nodehome/bin:$PATH npm install --omit=peer --ignore-scripts --no-audit --no-fund --loglevel=error "$tgz") \
    >"$work/install-nodes.log" 2>&1 || die "installing $tgz into n8n failed: $(tail -5 "$work/install-nodes.log")"
  say "installed $(basename "$tgz") into $work/n8n/home/.n8n/nodes"
}

# start.sh waits for n8n's own Webhook nodes; the Oncegate Trigger's paths are
# waited for here (a registered path answers another method with "not registered for").
n8n_start() {
  N8N_WORKFLOWS=$work/workflows "$n8n_scripts/start.sh" "$work/n8n" | grep -v ' is live$'
  local path
  for path in $(jq -r '.nodes[] | select(.type == "n8n-nodes-oncegate.oncegateTrigger") | .parameters.path' "$work"/workflows/*.json); do
    wait_until 60 trigger_live "$path" || die "the Oncegate Trigger at /webhook/$path was not registered after 60 s"
  done
}
trigger_live() { curl -s -m 2 "$N8N/webhook/$1" | grep -q 'not registered for GET'; }
n8n_stop() { "$n8n_scripts/stop.sh" "$work/n8n"; }

# baseline_db: a fresh PostgreSQL database with seed 001's claim table, for
# the baseline-pg-gate workflow; pg_db stays empty when PostgreSQL is not
# reachable (the baseline check then says so). Dropped by cleanup.
baseline_db() {
  command -v psql >/dev/null || return 1
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'SELECT 1' >/dev/null 2>&1 || return 1
  pg_db=oncegate_e2e_$$
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $pg_db" -c "CREATE DATABASE $pg_db" >/dev/null
  psql -h 127.0.0.1 -U postgres -d "$pg_db" -qc "CREATE TABLE webhook_event_claims (
    provider text NOT NULL, event_id text NOT NULL, event_type text NOT NULL,
    status text NOT NULL DEFAULT 'processing', first_seen_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz, last_error text, attempt_count integer NOT NULL DEFAULT 1,
    PRIMARY KEY (provider, event_id))" >/dev/null
}

cleanup() {
  local status=$?
  set +e
  [ -f "$work/n8n/n8n.pid" ] && n8n_stop >/dev/null
  [ -n "${og_pid:-}" ] && kill "$og_pid" 2>/dev/null && wait "$og_pid" 2>/dev/null
  [ -n "${target_pid:-}" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  [ -n "${pg_db:-}" ] && psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1
  if [ "$status" -ne 0 ] || [ "${#FAILED[@]}" -gt 0 ] || [ "${E2E_KEEP:-}" = 1 ]; then
    say "kept $work (oncegate.log, n8n/n8n.log, target.log, oncegate.db)"
  else
    rm -rf "$work"
  fi
}

summary() {
  step "summary"
  # The closing line CI reads: "N passed, N failed, N skipped" (skipped: not yet available).
  printf 'e2e-n8n: %d passed, %d failed, %d skipped\n' "${#PASSED[@]}" "${#FAILED[@]}" "${#SKIPPED[@]}"
  local name
  for name in "${FAILED[@]}"; do printf '  failed: %s\n' "$name"; done
  for name in "${SKIPPED[@]}"; do printf '  not yet available: %s\n' "$name"; done
  [ "${#FAILED[@]}" -eq 0 ]
}

# ---------------------------------------------------------------- HTTP

# run_state NAMESPACE KEY: the run's state, or "none".
run_state() {
  curl -s -G "$OG/v1/runs" -H "Authorization: Bearer $ADMIN_TOKEN" \
    --data-urlencode "namespace=$1" --data-urlencode "key=$2" | jq -r '.state // "none"'
}

run_view() {
  curl -s -G "$OG/v1/runs" -H "Authorization: Bearer $ADMIN_TOKEN" \
    --data-urlencode "namespace=$1" --data-urlencode "key=$2"
}

state_is() { [ "$(run_state "$1" "$2")" = "$3" ]; }

# records PATH [JQ-CONDITION]: requests the counting target got at exactly PATH.
records() {
  curl -s "$TARGET/records?prefix=$1" | jq -c --arg p "$1" "[.[] | select(.path == \$p) | select(${2:-true})]"
}

count() { records "$1" "${2:-true}" | jq length; }
count_is() { [ "$(count "$1" "${3:-true}")" = "$2" ]; }

target_post() {
  local body=${2:-'{}'}
  curl -sf -X POST "$TARGET$1" -H 'Content-Type: application/json' -d "$body" >/dev/null
}

# stripe_event FILE ID TYPE CHARGE: writes a Stripe-style event.
stripe_event() {
  jq -cn --arg id "$2" --arg type "$3" --arg charge "$4" \
    '{id: $id, object: "event", type: $type, created: now | floor,
      data: {object: {id: $charge, object: "charge", amount: 4200, currency: "eur", customer: "cus_ada"}}}' >"$1"
}

# sign FILE [SECRET]: writes FILE.hdr, the Stripe-Signature header over "t.body".
sign() {
  local t sig
  t=$(date +%s)
  sig=$( { printf '%s.' "$t"; cat "$1"; } | openssl dgst -sha256 -hmac "${2:-$STRIPE_WEBHOOK_SECRET}" | awk '{print $NF}')
  printf 'Stripe-Signature: t=%s,v1=%s\n' "$t" "$sig" >"$1.hdr"
}

# sw_sign FILE ID [SECRET] [TIMESTAMP]: writes FILE.hdr, Standard Webhooks headers
# (webhook-id, webhook-timestamp, webhook-signature v1 over "id.timestamp.body").
sw_sign() {
  local secret=${3:-$N8N_SIGNING_SECRET} ts=${4:-$(date +%s)} key sig
  key=$(printf '%s' "${secret#whsec_}" | base64 -d | od -An -tx1 | tr -d ' \n')
  sig=$({ printf '%s.%s.' "$2" "$ts"; cat "$1"; } | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -binary | base64)
  printf 'webhook-id: %s\nwebhook-timestamp: %s\nwebhook-signature: v1,%s\n' "$2" "$ts" "$sig" >"$1.hdr"
}

# deliver FILE: posts a signed event to oncegate; prints the body, then the status.
deliver() {
  curl -s -m 30 -w '\n%{http_code}' -X POST "$OG/hooks/stripe" -H 'Content-Type: application/json' \
    -H @"$1.hdr" --data-binary @"$1"
}

# burst N OUT CURL-ARGS...: N copies of one request at once; OUT/codes holds
# the statuses, OUT/<i>.body the answers.
burst() {
  local n=$1 out=$2
  shift 2
  mkdir -p "$out"
  seq "$n" | xargs -P "$n" -I{} curl -s -m 180 -o "$out/{}.body" -w '%{http_code}\n' "$@" >"$out/codes" || true
}

# probe PATH: the status oncegate gives an empty JSON body at PATH (404: no such endpoint).
probe() {
  curl -s -o /dev/null -w '%{http_code}' -X POST "$OG$1" -H "Authorization: Bearer $WF_TOKEN" \
    -H 'Content-Type: application/json' -d '{}'
}
