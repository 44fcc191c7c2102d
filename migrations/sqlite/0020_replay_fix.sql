-- Replay after a fix (DESIGN.md §7) and model output (§6).
--
-- The schema version of the workflow that produced an effect, as its
-- commit declared it; a dead letter copies it from the failed effect.
ALTER TABLE effects ADD COLUMN schema_version TEXT;

-- The request the failed effect sent, as JSON: method, URL, the headers
-- oncegate stores (never the target's credentials, which are added at
-- send time from its configuration), the idempotency key and the body,
-- redacted like every other payload-derived copy.
ALTER TABLE dead_letters ADD COLUMN last_request TEXT;

-- Four eyes: a job holding replays of an operation listed in
-- dead_letters.four_eyes is created stopped, and only an operator other
-- than its creator may start it (started_by).
ALTER TABLE replay_jobs ADD COLUMN four_eyes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replay_jobs ADD COLUMN started_by TEXT;
