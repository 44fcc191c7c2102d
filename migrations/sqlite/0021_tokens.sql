-- API tokens made at run time (DESIGN.md §5): created through the API,
-- the CLI or the console, shown once, stored as their SHA-256 digest only,
-- listed, given an expiry and revoked. The first-start admin token lives
-- in the same table and is the one row without a creator.
--
-- id: a public handle (the first 16 hex digits of the digest), for lists
-- and revocation; namespaces: a JSON array of patterns, NULL for every
-- namespace (the model of [[tokens]] in the config file); created_by:
-- the subject that made it, NULL for the first-start token; expires_at and
-- revoked_at: milliseconds since the epoch, NULL for never and not yet.
ALTER TABLE api_tokens ADD COLUMN id TEXT;
ALTER TABLE api_tokens ADD COLUMN namespaces TEXT;
ALTER TABLE api_tokens ADD COLUMN created_by TEXT;
ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE api_tokens ADD COLUMN revoked_at INTEGER;
UPDATE api_tokens SET id = substr(digest, 8, 16);
CREATE UNIQUE INDEX api_tokens_id ON api_tokens (id);
