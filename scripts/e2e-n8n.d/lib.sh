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
start_n8n() {
  step "n8n with the examples"
  mkdir -p "$work/n8n" "$work/workflows"
  ln -s "$n8n_dir/runtime" "$work/n8n/runtime"
  ln -s "$n8n_dir/app" "$work/n8n/app"
  cp "$repo"/examples/n8n/*.json "$here/baseline-direct.json" "$work/workflows/"
  jq -n --arg token "Bearer $WF_TOKEN" --arg secret "$N8N_FORWARD_SECRET" '[
    {id: "ogWorkflowToken1", name: "oncegate workflow token", type: "httpHeaderAuth",
     data: {name: "Authorization", value: $token}},
    {id: "ogForwardSecret1", name: "oncegate forward secret", type: "httpHeaderAuth",
     data: {name: "X-Oncegate-Secret", value: $secret}}]' >"$work/credentials.json"
  n8n_cli import:credentials --input="$work/credentials.json" >"$work/n8n-credentials.log" 2>&1 \
    || die "importing credentials failed: $(tail -5 "$work/n8n-credentials.log")"
  rm -f "$work/credentials.json"
  n8n_start
}

n8n_start() { N8N_WORKFLOWS=$work/workflows "$n8n_scripts/start.sh" "$work/n8n" | grep -v ' is live$'; }
n8n_stop() { "$n8n_scripts/stop.sh" "$work/n8n"; }

cleanup() {
  local status=$?
  set +e
  [ -f "$work/n8n/n8n.pid" ] && n8n_stop >/dev/null
  [ -n "${og_pid:-}" ] && kill "$og_pid" 2>/dev/null && wait "$og_pid" 2>/dev/null
  [ -n "${target_pid:-}" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  if [ "$status" -ne 0 ] || [ "${#FAILED[@]}" -gt 0 ] || [ "${E2E_KEEP:-}" = 1 ]; then
    say "kept $work (oncegate.log, n8n/n8n.log, target.log, oncegate.db)"
  else
    rm -rf "$work"
  fi
}

summary() {
  step "summary"
  printf '  %d passed, %d failed, %d not yet available\n' "${#PASSED[@]}" "${#FAILED[@]}" "${#SKIPPED[@]}"
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
