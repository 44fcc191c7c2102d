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
    status        INTEGER NOT NULL,
    payload_hash  TEXT    NOT NULL,
    body_bytes    INTEGER NOT NULL,
    raw_event_id  TEXT,
    run_namespace TEXT,
    run_key       TEXT,
    detail        TEXT,
    forwarded_key TEXT,
    forwarded_by  TEXT,
    forwarded_at  INTEGER,
    redeliveries  INTEGER NOT NULL DEFAULT 0,
    received_at   INTEGER NOT NULL
);
CREATE INDEX deliveries_time ON deliveries (received_at, id);
CREATE INDEX deliveries_source ON deliveries (source, received_at, id);
CREATE INDEX deliveries_event ON deliveries (source, event_id);
CREATE INDEX deliveries_outcome ON deliveries (outcome, received_at, id);

-- A verified event whose business key another run holds is stored as a
-- raw event of status duplicate_of (SQLite cannot alter a CHECK: the
-- table is rebuilt, its rows and index kept).
CREATE TABLE raw_events_next (
    id           TEXT    PRIMARY KEY,
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    event_type   TEXT,
    status       TEXT    NOT NULL CHECK (status IN ('accepted', 'quarantined', 'duplicate_of')),
    payload_hash TEXT    NOT NULL,
    content_type TEXT,
    headers      TEXT    NOT NULL,
    body         BLOB    NOT NULL,
    received_at  INTEGER NOT NULL
);
INSERT INTO raw_events_next
    SELECT id, source, event_id, event_type, status, payload_hash, content_type, headers, body,
           received_at
    FROM raw_events;
DROP TABLE raw_events;
ALTER TABLE raw_events_next RENAME TO raw_events;
CREATE UNIQUE INDEX raw_events_accepted ON raw_events (source, event_id) WHERE status = 'accepted';
CREATE INDEX raw_events_received ON raw_events (status, received_at);
