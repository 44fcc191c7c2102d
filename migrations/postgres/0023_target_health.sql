-- Target health (DESIGN.md §4): a target that keeps failing transiently
-- is paused for every instance, then probed half-open; a 410 Gone
-- disables it until an operator enables it. One row per target that ever
-- left "healthy"; no row means healthy.
--
-- state: healthy | paused | probing | disabled. failures: consecutive
-- transient failures (not sent, 429, 503). pauses: consecutive pauses
-- (the cool-down doubles with each, up to the cap). paused_at: when the
-- current pause or disable began; paused_until: when its cool-down ends.
-- probe_owner / probe_expires_at: the dispatcher holding the one
-- half-open probe, and until when. paused_ms: milliseconds paused in
-- pauses that have ended (the time-paused counter adds the current one).
-- All times are milliseconds since the epoch.
CREATE TABLE target_health (
    target           TEXT   PRIMARY KEY,
    state            TEXT   NOT NULL,
    failures         BIGINT NOT NULL DEFAULT 0,
    pauses           BIGINT NOT NULL DEFAULT 0,
    paused_at        BIGINT,
    paused_until     BIGINT,
    probe_owner      TEXT,
    probe_expires_at BIGINT,
    paused_ms        BIGINT NOT NULL DEFAULT 0,
    cause            TEXT,
    changed_by       TEXT   NOT NULL,
    changed_at       BIGINT NOT NULL
);
