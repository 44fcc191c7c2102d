-- An effect's role: `act` (a consequential write that completes its run) or
-- `notify` (a decision callback that reports on its run and never moves it).
-- The outbox's statements read the role instead of naming the approval
-- callback's operation.
ALTER TABLE effects ADD COLUMN role TEXT NOT NULL DEFAULT 'act';
UPDATE effects SET role = 'notify' WHERE operation = 'approval.callback';
