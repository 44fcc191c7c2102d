-- Issue 25, the remaining findings.
--
-- M2: a business key is unique per namespace, no longer across all of
-- them, so no namespace (a workflow token's) can hold a key that blocks
-- another's (a webhook source's) events. Every existing row stays valid:
-- a key unique across all namespaces is unique within each.
DROP INDEX runs_business_key;
CREATE UNIQUE INDEX runs_business_key ON runs (business_key, namespace);

-- M3: the bodies a source whose signature covers only the body has seen
-- lately, one row per distinct body with the event id it first came
-- under; the same body under another id inside the source's window is a
-- duplicate of that event. A row past its window (expires_at) no longer
-- counts and is deleted by the retention sweep.
CREATE TABLE ingress_bodies (
    source       TEXT   NOT NULL,
    payload_hash TEXT   NOT NULL,
    event_id     TEXT   NOT NULL,
    seen_at      BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (source, payload_hash)
);
CREATE INDEX ingress_bodies_expiry ON ingress_bodies (expires_at);

-- M5: the server's own secret, generated at the first start when the
-- configuration names none; it keys the approve_by_exception sample so a
-- workflow cannot predict which runs a person sees.
CREATE TABLE server_secrets (
    name       TEXT   PRIMARY KEY,
    value      TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
