-- A lease is a reservation a process holds on part of a key's budget and its workspace's credit; its requests
-- draw on it in memory and the process writes what they spent back in batches (handlers/metering/ledger.py).
-- `in_flight` is what the process's requests held when it last wrote: the rest of the lease is not "in flight".
ALTER TABLE reservations ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN in_flight TEXT NOT NULL DEFAULT '0';
CREATE INDEX reservations_leases ON reservations (workspace_id, key_id) WHERE state = 'held' AND lease = TRUE;
