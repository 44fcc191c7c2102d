-- The reclaim budget (DESIGN.md §2, "Nothing is stranded"): `reclaims`
-- counts reclaims since the budget started, `budget_started_at` is when an
-- operator release last restarted it (NULL: the run's first claim,
-- `created_at`). Existing runs count the reclaims they already had.
ALTER TABLE runs ADD COLUMN reclaims BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN budget_started_at BIGINT;
UPDATE runs SET reclaims = attempts - 1 WHERE attempts > 1;
-- No new index: the sweeper finds its runs through runs_state_updated
-- (state first), and one more index on runs would slow every claim.
