-- The operator console's run search (issue 7): find a key, or keys that
-- start with some text, across every namespace. The primary key leads with
-- namespace, so without this index a search by key alone reads every run.
-- (run_key, namespace) also orders the result for keyset paging.
-- Mirrors migrations/postgres/0007_console.sql.
CREATE INDEX runs_key ON runs (run_key, namespace);
