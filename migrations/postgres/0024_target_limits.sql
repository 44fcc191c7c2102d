-- Cluster-wide send rate per target (DESIGN.md §4, §9): a token bucket row
-- per target, taken under a row lock by every lease of the target, so all
-- instances together lease no faster than the target's rate_per_second.
-- The same lock makes the lease's count of the target's in-flight
-- (sending) effects exact, so they never exceed its concurrency.
-- Used on PostgreSQL; a single SQLite node keeps its in-process limits
-- (the table exists there too, so both schemas stay alike).
--
-- tokens_milli: thousandths of a send; refilled_at: milliseconds since the
-- epoch of the last refill.
CREATE TABLE target_limits (
    target       TEXT   PRIMARY KEY,
    tokens_milli BIGINT NOT NULL,
    refilled_at  BIGINT NOT NULL
);
