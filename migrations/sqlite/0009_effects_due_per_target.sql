-- The dispatcher leases each target's due effects up to that target's share
-- of the effects in flight, so that a slow target's backlog cannot fill every
-- lease; each target's due effects are walked in order through this index.
DROP INDEX IF EXISTS effects_due;
CREATE INDEX effects_due ON effects (state, target, next_attempt_at);
