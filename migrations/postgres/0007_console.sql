-- The operator console's run search (issue 7): find a key, or keys that
-- start with some text, across every namespace. The primary key leads with
-- namespace, so without this index a search by key alone reads every run.
-- Byte order ("C" collation) makes "starts with" a range scan whatever the
-- database's collation; the search spells its comparisons the same way.
-- Mirrors migrations/sqlite/0007_console.sql.
CREATE INDEX runs_key ON runs (run_key COLLATE "C", namespace COLLATE "C");
