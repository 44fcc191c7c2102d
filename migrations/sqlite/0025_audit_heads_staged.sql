-- Heads an audit checkpoint in preparation has written ahead of its row,
-- in chunks, so that writing one holds a chunk of moved heads in memory
-- rather than all of them. The transaction that inserts checkpoint
-- `checkpoint_id` moves its attempt's rows into audit_heads and deletes
-- every staged row of that id or an earlier one (attempts that lost the
-- race for the id, or stopped half-way, can no longer commit).
-- No key and no index: the rows are written once, in the head scan's
-- order, and read back and deleted whole (an index on the text columns
-- cost more than the staging itself).
CREATE TABLE audit_heads_staged (
    checkpoint_id INTEGER NOT NULL,
    attempt       TEXT    NOT NULL,
    namespace     TEXT    NOT NULL,
    run_key       TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    head          TEXT    NOT NULL
);
