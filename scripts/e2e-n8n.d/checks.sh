# The checks of scripts/e2e-n8n, one function each. Sourced after lib.sh.
# Effects are counted where they land: at the counting target.
# shellcheck shell=bash

ev=""   # the folder for generated events (set by lib.sh's write_config)

# ---------------------------------------------------------------- gate in front

check_signed_event_once() {
  step "gate in front: a signed event delivered once → one effect"
  local f=$ev/single.json answer
  stripe_event "$f" evt_single charge.succeeded ch_single
  sign "$f"
  answer=$(deliver "$f")
  if [ "$(tail -1 <<<"$answer")" != 200 ] || [ "$(head -1 <<<"$answer" | jq -c .)" != '{"received":true}' ]; then
    bad "signed event accepted" "oncegate answered $(tr '\n' ' ' <<<"$answer")"
    return
  fi
  if ! wait_until 60 state_is payments record-payment:ch_single:v1 completed \
    || ! wait_until 30 state_is stripe evt_single completed; then
    bad "signed event → one effect" "business run $(run_state payments record-payment:ch_single:v1), ingress run $(run_state stripe evt_single) after 60 s"
    return
  fi
  local sent key
  sent=$(records /crm/payments '.body.charge == "ch_single"')
  key=$(jq -r '.[0].idempotency_key' <<<"$sent")
  if [ "$(jq length <<<"$sent")" = 1 ] && [ "$key" = payments:record-payment:ch_single:v1:crm_payment ]; then
    ok "signed event → one effect" "Idempotency-Key $key"
  else
    bad "signed event → one effect" "the CRM got $(jq length <<<"$sent") requests, key $key"
  fi
  answer=$(deliver "$f")
  if [ "$(head -1 <<<"$answer" | jq -c 'select(.received == true and .duplicate == true)')" != "" ] \
    && count_is /crm/payments 1 '.body.charge == "ch_single"'; then
    ok "redelivery of a handled event → duplicate, nothing new"
  else
    bad "redelivery of a handled event" "answer $(head -1 <<<"$answer"), CRM requests $(count /crm/payments '.body.charge == "ch_single"')"
  fi
}

check_bad_signature() {
  step "gate in front: a bad signature → 401, nothing stored"
  local f=$ev/forged.json answer
  stripe_event "$f" evt_forged charge.succeeded ch_forged
  sign "$f" whsec_not_the_secret
  answer=$(deliver "$f")
  if [ "$(tail -1 <<<"$answer")" = 401 ] && [ "$(run_state stripe evt_forged)" = none ]; then
    ok "bad signature refused" "$(head -1 <<<"$answer" | jq -r .type)"
  else
    bad "bad signature refused" "answer $(tr '\n' ' ' <<<"$answer"), run $(run_state stripe evt_forged)"
  fi
}

check_unsigned_forward() {
  step "gate in front: a forward oncegate did not sign → refused by the Oncegate Trigger, nothing runs"
  if [ "$variant" != nodes ]; then
    say "n/a for the $variant variant (its Webhook node checks the X-Oncegate-Secret header)"
    return
  fi
  local f=$ev/unsigned.json status why=""
  stripe_event "$f" evt_unsigned charge.succeeded ch_unsigned
  status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$N8N/webhook/og-stripe-payments" \
    -H 'Content-Type: application/json' --data-binary @"$f")
  [ "$status" = 401 ] || why+="unsigned: $status; "
  sw_sign "$f" evt_unsigned "whsec_$(openssl rand -base64 32)"
  status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$N8N/webhook/og-stripe-payments" \
    -H 'Content-Type: application/json' -H @"$f.hdr" --data-binary @"$f")
  [ "$status" = 401 ] || why+="another secret: $status; "
  sw_sign "$f" evt_unsigned "$N8N_SIGNING_SECRET" $(($(date +%s) - 3600))
  status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$N8N/webhook/og-stripe-payments" \
    -H 'Content-Type: application/json' -H @"$f.hdr" --data-binary @"$f")
  [ "$status" = 401 ] || why+="signed an hour ago (a replay): $status; "
  sw_sign "$f" evt_unsigned
  printf '{"tampered":true}' >"$f.tampered"
  status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$N8N/webhook/og-stripe-payments" \
    -H 'Content-Type: application/json' -H @"$f.hdr" --data-binary @"$f.tampered")
  [ "$status" = 401 ] || why+="another body: $status; "
  if [ -z "$why" ] && state_is payments record-payment:ch_unsigned:v1 none; then
    ok "forward without oncegate's signature refused" "unsigned, another secret, a replay and another body: 401, no claim"
  else
    bad "forward without oncegate's signature refused" "${why}business run $(run_state payments record-payment:ch_unsigned:v1)"
  fi
}

check_hundred_deliveries() {
  step "gate in front: the same event 100 times at once → one effect"
  local f=$ev/burst.json out=$work/burst-ingress fresh codes
  stripe_event "$f" evt_burst charge.succeeded ch_burst
  sign "$f"
  burst 100 "$out" -X POST "$OG/hooks/stripe" -H 'Content-Type: application/json' -H @"$f.hdr" --data-binary @"$f"
  codes=$(sort "$out/codes" | uniq -c | tr -s ' ' | tr '\n' ',')
  fresh=$(cat "$out"/*.body | jq -s '[.[] | select(.received == true and .duplicate == null)] | length')
  # A second event about the same charge reaches n8n, whose claim finds the business run taken.
  local g=$ev/burst-2.json
  stripe_event "$g" evt_burst_2 charge.updated ch_burst
  sign "$g"
  deliver "$g" >/dev/null
  wait_until 90 state_is stripe evt_burst completed || true
  wait_until 90 state_is stripe evt_burst_2 completed || true
  wait_until 60 state_is payments record-payment:ch_burst:v1 completed || true
  local n
  n=$(count /crm/payments '.body.charge == "ch_burst"')
  if [ "$(grep -c '^200$' "$out/codes")" = 100 ] && [ "$fresh" = 1 ] && [ "$n" = 1 ] \
    && state_is stripe evt_burst_2 completed; then
    ok "100 concurrent deliveries → one effect" "statuses:$codes first-time answers $fresh; a second event for the charge added nothing"
  else
    bad "100 concurrent deliveries → one effect" "statuses:$codes first-time answers $fresh, CRM requests $n, evt_burst_2 $(run_state stripe evt_burst_2)"
  fi
}

# n8n_executions WORKFLOW_ID: how many executions n8n stored for the workflow.
n8n_executions() {
  python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("SELECT COUNT(*) FROM execution_entity WHERE workflowId = ?", (sys.argv[2],)).fetchone()[0])' \
    "$work/n8n/home/.n8n/database.sqlite" "$1"
}

check_baseline_storm() {
  step "seed 001's gate inside n8n (Postgres INSERT … ON CONFLICT DO NOTHING RETURNING) beside oncegate: one event 100 times at once"
  if [ -z "${pg_db:-}" ]; then
    unavailable "seed-001 baseline beside oncegate" "no PostgreSQL on 127.0.0.1:5432"
    return
  fi
  local f=$ev/storm-pg.json g=$ev/storm-og.json t0 t1 t2 t3 e0 e1 g0 g1
  stripe_event "$f" evt_storm_pg charge.succeeded ch_storm_pg
  stripe_event "$g" evt_storm_og charge.succeeded ch_storm_og
  sign "$g"
  e0=$(n8n_executions ogBaselinePgGate)
  t0=$(now)
  burst 100 "$work/storm-pg" -X POST "$N8N/webhook/og-baseline-pg" -H 'Content-Type: application/json' --data-binary @"$f"
  t1=$(now)
  wait_until 60 count_is /crm/payments-pg 1 '.body.charge == "ch_storm_pg"' || true
  e1=$(n8n_executions ogBaselinePgGate)
  g0=$(n8n_executions ogGateInFront001)
  t2=$(now)
  burst 100 "$work/storm-og" -X POST "$OG/hooks/stripe" -H 'Content-Type: application/json' -H @"$g.hdr" --data-binary @"$g"
  wait_until 90 state_is payments record-payment:ch_storm_og:v1 completed || true
  t3=$(now)
  g1=$(n8n_executions ogGateInFront001)
  local pg_n og_n pg_ok og_ok pg_rate
  pg_n=$(count /crm/payments-pg '.body.charge == "ch_storm_pg"')
  og_n=$(count /crm/payments '.body.charge == "ch_storm_og"')
  pg_ok=$(grep -c '^200$' "$work/storm-pg/codes" || true)
  og_ok=$(grep -c '^200$' "$work/storm-og/codes" || true)
  pg_rate=$(awk -v n=$((e1 - e0)) -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }')
  say "  seed-001 gate in n8n: $pg_n effect(s), $pg_ok/100 answered 200, $((e1 - e0)) n8n executions in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s ($pg_rate executions/s)"
  say "  oncegate in front:    $og_n effect(s), $og_ok/100 answered 200, $((g1 - g0)) n8n execution(s); the storm settled (run completed) in $(awk -v a="$t2" -v b="$t3" 'BEGIN { printf "%.1f", b - a }') s"
  if [ "$og_n" = 1 ] && [ "$og_ok" = 100 ] && [ "$pg_ok" = 100 ] && [ "$((e1 - e0))" -ge 1 ]; then
    ok "seed-001 baseline beside oncegate, 100-way storm" "effects: baseline $pg_n, oncegate $og_n; n8n executions: baseline $((e1 - e0)), oncegate $((g1 - g0))"
  else
    bad "seed-001 baseline beside oncegate, 100-way storm" "effects: baseline $pg_n, oncegate $og_n; 200s: baseline $pg_ok, oncegate $og_ok; executions: baseline $((e1 - e0))"
  fi
}

# ---------------------------------------------------------------- claim inside

check_claim_inside_burst() {
  step "claim inside: 100 identical requests straight to the n8n webhook → one effect"
  local out=$work/burst-n8n body='{"order_id":"o-burst","sku":"sku-7","qty":2,"address":"1 Main St"}'
  burst 100 "$out" -X POST "$N8N/webhook/og-orders" -H 'Content-Type: application/json' -d "$body"
  local codes statuses accepted
  codes=$(sort "$out/codes" | uniq -c | tr -s ' ' | tr '\n' ',')
  statuses=$(cat "$out"/*.body | jq -rs '[.[] | .status // "?"] | group_by(.) | map("\(length) \(.[0])") | join(", ")' 2>/dev/null || echo "unreadable")
  accepted=$(cat "$out"/*.body | jq -s '[.[] | select(.status == "accepted")] | length' 2>/dev/null || echo 0)
  wait_until 60 state_is orders create-shipment:o-burst:v1 completed || true
  local n
  n=$(count /warehouse/shipments '.body.order_id == "o-burst"')
  if [ "$accepted" = 1 ] && [ "$n" = 1 ] && ! grep -q '^5' "$out/codes"; then
    ok "100 concurrent requests → one effect" "HTTP:$codes answers: $statuses"
  else
    bad "100 concurrent requests → one effect" "HTTP:$codes answers: $statuses; shipments $n"
  fi
  # A later duplicate answers with the prior outcome.
  local later
  later=$(curl -s -X POST "$N8N/webhook/og-orders" -H 'Content-Type: application/json' -d "$body")
  if [ "$(jq -r .status <<<"$later")" = duplicate ] && [ "$(jq -r .result.shipment <<<"$later")" = queued ]; then
    ok "a later duplicate gets the prior outcome" "$later"
  else
    bad "a later duplicate gets the prior outcome" "$later"
  fi
}

# ---------------------------------------------------------------- batch

batch_states() {
  local i states=""
  for i in 01 02 03 04 05 06 07 08 09 10; do
    states+="$(run_state invoices "sync-invoice-line:b1-item-$i:v1") "
  done
  printf '%s' "$states"
}

start_batch() {
  curl -sf -X POST "$N8N/webhook/og-invoice-batch" -H 'Content-Type: application/json' -d '{"batch_id":"b1"}' >/dev/null \
    || { bad "batch" "the batch webhook refused the request"; return 1; }
}

batch_is() { [ "$(batch_states)" = "$1" ]; }

check_batch_rerun() {
  step "batch: 10 items with their own keys, 3 fail, the re-run repeats only those 3"
  local failing='["b1-item-03","b1-item-06","b1-item-09"]' c=completed r=failed_retryable
  local first="$c $c $r $c $c $r $c $c $r $c " all="$c $c $c $c $c $c $c $c $c $c "
  target_post /control/fail "{\"ids\":$failing}"
  start_batch || return
  if ! wait_until 90 batch_is "$first"; then
    bad "batch first run: 7 done, 3 failed_retryable" "states: $(batch_states)"
    return
  fi
  local synced boundary
  synced=$(records /crm/invoice-lines | jq -c '[.[].body.id] | sort')
  ok "batch first run: 7 done, 3 failed_retryable" "CRM got $(jq length <<<"$synced") lines"
  boundary=$(curl -s "$TARGET/records" | jq '[.[].seq] | max')
  target_post /control/fail '{"ids":[]}'
  start_batch || return
  if ! wait_until 90 batch_is "$all"; then
    bad "batch re-run completes the rest" "states: $(batch_states)"
    return
  fi
  local repeated lines distinct
  repeated=$(curl -s "$TARGET/records?prefix=/lookup/" | jq -c --argjson b "$boundary" '[.[] | select(.seq > $b) | .path | ltrimstr("/lookup/")] | sort')
  lines=$(count /crm/invoice-lines)
  distinct=$(records /crm/invoice-lines | jq '[.[].body.id] | unique | length')
  if [ "$repeated" = "$failing" ] && [ "$lines" = 10 ] && [ "$distinct" = 10 ]; then
    ok "batch re-run repeats only the 3 failed items" "re-run looked up $repeated; CRM holds 10 lines, each once"
  else
    bad "batch re-run repeats only the 3 failed items" "re-run looked up $repeated; CRM requests $lines for $distinct lines"
  fi
}

# ---------------------------------------------------------------- approval

# decide TICKET DECISION: waits for the approval link, logs in as the approver, decides.
decide() {
  local ticket=$1 decision=$2 url page csrf choice jar=$work/approver-$1.cookies status
  if ! wait_until 60 count_is /chat/notify 1 "(.body.kind == \"approval_requested\" and .body.ticket == \"$ticket\")"; then
    echo "no approval link was posted to the chat"
    return 1
  fi
  url=$(records /chat/notify "(.body.kind == \"approval_requested\" and .body.ticket == \"$ticket\")" | jq -r '.[0].body.approval_url')
  case $url in /*) url=$OG$url ;; esac
  status=$(curl -s -o /dev/null -w '%{http_code}' -c "$jar" -X POST "$OG/login" --data-urlencode "token=$APPROVER_TOKEN")
  case $status in 2* | 3*) ;; *) echo "POST /login answered $status"; return 1 ;; esac
  page=$(curl -s -b "$jar" -c "$jar" "$url")
  csrf=$(grep -o 'name="csrf"[^>]*' <<<"$page" | grep -o 'value="[^"]*"' | head -1 | cut -d'"' -f2)
  [ -n "$csrf" ] || { echo "the approval page has no csrf field"; return 1; }
  # The page's own buttons name the decision values (approve/reject).
  choice=$(grep -o 'name="decision"[^>]*' <<<"$page" | grep -o 'value="[^"]*"' | cut -d'"' -f2 \
    | grep -m1 "^${decision:0:6}" || true)
  [ -n "$choice" ] || { echo "the approval page offers no ${decision:0:6}… decision"; return 1; }
  status=$(curl -s -o /dev/null -w '%{http_code}' -b "$jar" -X POST "$url" \
    --data-urlencode "decision=$choice" --data-urlencode "csrf=$csrf")
  case $status in 2* | 3*) ;; *) echo "POST $url answered $status"; return 1 ;; esac
}

ask_for_reply() {
  curl -sf -X POST "$N8N/webhook/og-support-reply" -H 'Content-Type: application/json' \
    -d "{\"ticket\":\"$1\",\"customer_email\":\"ada@example.com\",\"question\":\"Where is my refund?\",\"requested_by\":\"sam\"}" >/dev/null
}

check_approval() {
  step "AI draft with approval: approved → one effect, rejected → none"
  local path status
  for path in /v1/runs/output /v1/runs/gate /login; do
    status=$(probe "$path")
    if [ "$status" = 404 ] || [ "$status" = 405 ]; then
      unavailable "approval approved → one effect" "POST $path answered $status"
      unavailable "approval rejected → no effect" "POST $path answered $status"
      return
    fi
  done
  local why
  ask_for_reply T-approve
  ask_for_reply T-reject
  if why=$(decide T-approve approved) \
    && wait_until 60 count_is /chat/notify 1 '(.body.kind == "decision" and .body.ticket == "T-approve" and .body.decision == "approved")' \
    && wait_until 60 count_is /mailer/messages 1 '.body.ticket == "T-approve"' \
    && wait_until 30 state_is support reply:T-approve:v1 completed; then
    ok "approval approved → one effect" "the Wait node resumed; the mailer got 1 message"
  else
    bad "approval approved → one effect" "${why:-mailer $(count /mailer/messages '.body.ticket == "T-approve"'), run $(run_state support reply:T-approve:v1)}"
  fi
  if why=$(decide T-reject rejected) \
    && wait_until 60 count_is /chat/notify 1 '(.body.kind == "decision" and .body.ticket == "T-reject" and .body.decision == "rejected")' \
    && state_is support reply:T-reject:v1 failed_terminal && count_is /mailer/messages 0 '.body.ticket == "T-reject"'; then
    ok "approval rejected → no effect" "the Wait node resumed with the rejection; the mailer got nothing"
  else
    bad "approval rejected → no effect" "${why:-mailer $(count /mailer/messages '.body.ticket == "T-reject"'), run $(run_state support reply:T-reject:v1)}"
  fi
}

# ---------------------------------------------------------------- error workflow

check_error_workflow() {
  step "error workflow: a failing execution → a dead letter with evidence"
  local status
  status=$(probe /v1/runs/fail-by-execution)
  if [ "$status" = 404 ] || [ "$status" = 405 ]; then
    unavailable "failing execution → dead letter" "POST /v1/runs/fail-by-execution answered $status"
    return
  fi
  target_post /control/fail '{"ids":["T-error"]}'
  ask_for_reply T-error
  if wait_until 90 state_is support reply:T-error:v1 dead_lettered; then
    local evidence
    evidence=$(dead_letter_evidence support reply:T-error:v1)
    if grep -q 'Model: draft reply' <<<"$evidence" && grep -qi 'workflow_error' <<<"$evidence"; then
      ok "failing execution → dead letter" "$evidence"
    else
      bad "failing execution → dead letter" "dead-lettered, but the evidence lacks the class or the failed node: $evidence"
    fi
  else
    bad "failing execution → dead letter" "run state $(run_state support reply:T-error:v1) after 90 s"
  fi
  target_post /control/fail '{"ids":[]}'
}

# dead_letter_evidence NAMESPACE KEY: class, error and detail of the run's
# dead letter (GET /v1/dead-letters), or the run's own reason when there is no such API.
dead_letter_evidence() {
  local page
  page=$(curl -s -G "$OG/v1/dead-letters" -H "Authorization: Bearer $ADMIN_TOKEN" \
    --data-urlencode "namespace=$1" --data-urlencode "resolved=any")
  if jq -e '.items' >/dev/null 2>&1 <<<"$page"; then
    local id
    id=$(jq -r --arg k "$2" '[.items[] | select(.key == $k)][0].id // empty' <<<"$page")
    curl -s "$OG/v1/dead-letters/$id" -H "Authorization: Bearer $ADMIN_TOKEN" \
      | jq -c '.dead_letter // . | {class, component, error, detail, run_state: .state}'
  else
    run_view "$1" "$2" | jq -c '{execution_ref, reason, last_error}'
  fi
}

# ---------------------------------------------------------------- n8n down

check_n8n_down() {
  step "n8n stopped while events arrive → all accepted, each delivered once when n8n is back"
  local i id accepted=0
  n8n_stop >/dev/null
  for i in $(seq -w 1 20); do
    id=down_$i
    stripe_event "$ev/$id.json" "evt_$id" charge.succeeded "ch_$id"
    sign "$ev/$id.json"
    [ "$(deliver "$ev/$id.json" | tail -1)" = 200 ] && accepted=$((accepted + 1))
  done
  local waiting
  waiting=$(for i in $(seq -w 1 20); do run_state stripe "evt_down_$i"; done | grep -c '^approved$' || true)
  n8n_start >/dev/null
  if wait_until 180 count_is /crm/payments 20 '(.body.charge | startswith("ch_down_"))' \
    && wait_until 60 all_forwarded; then
    local per
    per=$(records /crm/payments '(.body.charge | startswith("ch_down_"))' | jq -c '[group_by(.body.charge)[] | length] | unique')
    if [ "$accepted" = 20 ] && [ "$waiting" = 20 ] && [ "$per" = "[1]" ]; then
      ok "n8n down: 20 events accepted, each delivered once" "held while n8n was down: $waiting"
    else
      bad "n8n down" "accepted $accepted, held $waiting, requests per charge $per"
    fi
  else
    bad "n8n down" "accepted $accepted; after restart the CRM has $(count /crm/payments '(.body.charge | startswith("ch_down_"))') of 20"
  fi
}

all_forwarded() {
  local i
  for i in $(seq -w 1 20); do state_is stripe "evt_down_$i" completed || return 1; done
}

# ---------------------------------------------------------------- overhead

# cpu_ms PID: CPU time the process used so far, in milliseconds.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%d", ($14 + $15) * 1000 / hz }' "/proc/$1/stat"; }
# The machine's busy CPU time in ms (every process and the kernel; not idle or iowait).
busy_ms() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%d", ($2 + $3 + $4 + $7 + $8 + $9) * 1000 / hz }' /proc/stat; }

# bench KIND PREFIX N: sends N events with 8 senders and waits until the CRM
# has them all; prints "events/s n8n-cpu-ms/event oncegate-cpu-ms/event
# machine-cpu-ms/event".
#   gated   Stripe-signed → oncegate /hooks/stripe → gate-in-front workflow → oncegate → CRM
#   front   the same gate-in-front workflow, posted straight to n8n (no oncegate in front)
#   direct  a workflow that sends to the CRM itself, no oncegate at all (baseline-direct.json)
bench() {
  local kind=$1 dir=$work/bench-$2 n=$3 i t0 t1 n0 o0 m0 n1 o1 m1 url path=/crm/payments
  local n8n_pid
  n8n_pid=$(cat "$work/n8n/n8n.pid")
  mkdir -p "$dir"
  for i in $(seq -w 1 "$n"); do
    stripe_event "$dir/$i.json" "evt_$2_$i" charge.succeeded "ch_$2_$i"
    [ "$kind" = gated ] && sign "$dir/$i.json"
    if [ "$kind" = front ] && [ "$variant" = nodes ]; then sw_sign "$dir/$i.json" "front-$2-$i"; fi
    [ "$kind" = front ] && [ "$variant" = http ] && printf 'X-Oncegate-Secret: %s\n' "$N8N_FORWARD_SECRET" >"$dir/$i.json.hdr"
    [ "$kind" = direct ] && printf 'X-Bench: direct\n' >"$dir/$i.json.hdr"
  done
  case $kind in
    gated) url=$OG/hooks/stripe ;;
    front) url=$N8N/webhook/og-stripe-payments ;;
    direct) url=$N8N/webhook/og-baseline-payments path=/crm/payments-direct ;;
  esac
  n0=$(cpu_ms "$n8n_pid") o0=$(cpu_ms "$og_pid") m0=$(busy_ms) t0=$(now)
  (cd "$dir" && ls -- *.json | xargs -P 8 -I{} curl -s -o /dev/null -X POST "$url" \
    -H 'Content-Type: application/json' -H @{}.hdr --data-binary @{}) || true
  # Polled once a second and cheaply (the target counts), so that waiting
  # costs the same CPU whether the senders are done at once (gated: oncegate
  # answers in milliseconds) or only at the end (front): a poll every 0.2 s
  # through the full request log and jq took ~10 % of the machine from n8n.
  # The end is the last arrival's time at the target, not the poll's.
  local arrivals deadline=$((SECONDS + 600))
  until arrivals=$(curl -s -G "$TARGET/arrivals" --data-urlencode "path=$path" --data-urlencode "charge=ch_$2_") &&
    [ "$(jq .count <<<"$arrivals")" = "$n" ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
  n1=$(cpu_ms "$n8n_pid") o1=$(cpu_ms "$og_pid") m1=$(busy_ms)
  t1=$(jq .last_at <<<"$arrivals")
  awk -v n="$n" -v a="$t0" -v b="$t1" -v c=$((n1 - n0)) -v d=$((o1 - o0)) -v m=$((m1 - m0)) \
    'BEGIN { printf "%.1f %d %d %d", n / (b - a), c / n, d / n, m / n }'
}

# The mean of the given numbers, one decimal.
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }

measure_overhead() {
  step "overhead: executions/s with oncegate in front vs the same workflow without it"
  if [ "$bench_events" = 0 ]; then
    say "skipped (E2E_BENCH_EVENTS=0)"
    return
  fi
  # n8n slows as its execution history grows, so a fixed order would favour
  # whatever runs first: odd rounds run direct, front, gated; even rounds
  # the reverse, so that gated and front sit, on average, at the same place.
  local round kind result order
  declare -A rate cpu_n8n cpu_og cpu_all
  for round in $(seq 1 "$bench_rounds"); do
    order="direct front gated"
    [ $((round % 2)) = 0 ] && order="gated front direct"
    for kind in $order; do
      result=$(bench "$kind" "$kind$round" "$bench_events") || { bad "overhead" "the $kind round did not finish"; return; }
      read -r rate[$kind$round] cpu_n8n[$kind$round] cpu_og[$kind$round] cpu_all[$kind$round] <<<"$result"
    done
  done
  local direct front gated ratio whole
  declare -A rates cpu
  for kind in direct front gated; do
    rates[$kind]=$(for round in $(seq 1 "$bench_rounds"); do printf '%s ' "${rate[$kind$round]}"; done)
    # CPU ms per execution, mean over the rounds: n8n / oncegate / the whole machine.
    cpu[$kind]=$(for m in cpu_n8n cpu_og cpu_all; do
      declare -n col=$m
      mean $(for round in $(seq 1 "$bench_rounds"); do printf '%s ' "${col[$kind$round]}"; done)
      printf ' / '
    done)
    cpu[$kind]=${cpu[$kind]% / }
  done
  # shellcheck disable=SC2086 # word splitting intended: one number per round
  direct=$(mean ${rates[direct]})
  # shellcheck disable=SC2086
  front=$(mean ${rates[front]})
  # shellcheck disable=SC2086
  gated=$(mean ${rates[gated]})
  ratio=$(awk -v g="$gated" -v f="$front" 'BEGIN { printf "%.2f", g / f }')
  whole=$(awk -v g="$gated" -v d="$direct" 'BEGIN { printf "%.2f", g / d }')
  say "$bench_events events per round, 8 senders, $bench_rounds rounds (order alternating); CPU ms per execution (n8n / oncegate / whole machine), mean of the rounds"
  say "  gated:  provider → oncegate → gate-in-front workflow → CRM  ${rates[gated]}executions/s (mean $gated; CPU ${cpu[gated]})"
  say "  front:  the same workflow, posted straight to n8n          ${rates[front]}executions/s (mean $front; CPU ${cpu[front]})"
  say "  direct: a workflow that sends to the CRM itself            ${rates[direct]}executions/s (mean $direct; CPU ${cpu[direct]})"
  say "  whole pattern (claim + commit nodes, outbox) vs direct send: $whole"
  say "  load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  if awk -v r="$ratio" -v m="$min_ratio" 'BEGIN { exit !(r >= m) }'; then
    ok "oncegate in front keeps ≥ $min_ratio of the throughput" "gated/front = $ratio"
  else
    bad "oncegate in front keeps ≥ $min_ratio of the throughput" "gated/front = $ratio ($gated vs $front executions/s)"
  fi
}
