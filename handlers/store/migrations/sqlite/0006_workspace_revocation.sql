-- A revoked workspace is a state, reversible only by an explicit restore: its keys are refused (a key lookup reads
-- its workspace's revoked_at with it), and it takes no new keys and no credit.
ALTER TABLE workspaces ADD COLUMN revoked_at TEXT;
