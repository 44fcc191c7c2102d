-- The deliveries log (DESIGN.md §3, "Every delivery is visible"): one row
-- per verified request to /hooks/{source} with its outcome, the status it
-- was answered with, the body's hash and size, and links to the raw event
-- and the run it concerns. Unauthenticated requests never reach it (they
-- live in a bounded in-memory ring). An operator's "forward anyway" of a
-- duplicate_of delivery sets forwarded_key once; redeliveries counts the
-- operator's redeliveries of a stored event (each one a run of its own).
CREATE TABLE deliveries (
    id            TEXT    PRIMARY KEY,
    source        TEXT    NOT NULL,
    event_id      TEXT,
    event_type    TEXT,
    outcome       TEXT    NOT NULL,
    status        BIGINT  NOT NULL,
    payload_hash  TEXT    NOT NULL,
    body_bytes    BIGINT  NOT NULL,
    raw_event_id  TEXT,
    run_namespace TEXT,
    run_key       TEXT,
    detail        TEXT,
    forwarded_key TEXT,
    forwarded_by  TEXT,
    forwarded_at  BIGINT,
    redeliveries  BIGINT  NOT NULL DEFAULT 0,
    received_at   BIGINT  NOT NULL
);
CREATE INDEX deliveries_time ON deliveries (received_at, id);
CREATE INDEX deliveries_source ON deliveries (source, received_at, id);
CREATE INDEX deliveries_event ON deliveries (source, event_id);
CREATE INDEX deliveries_outcome ON deliveries (outcome, received_at, id);

-- A verified event whose business key another run holds is stored as a
-- raw event of status duplicate_of.
ALTER TABLE raw_events DROP CONSTRAINT raw_events_status_check;
ALTER TABLE raw_events ADD CONSTRAINT raw_events_status_check
    CHECK (status IN ('accepted', 'quarantined', 'duplicate_of'));
CREATE INDEX raw_events_received ON raw_events (status, received_at);
