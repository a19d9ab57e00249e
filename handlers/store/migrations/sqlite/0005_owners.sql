-- Each process (an owner) beats in `owners` every ledger.heartbeat_seconds; its holds and leases carry its id, so
-- a live process can release those of one that stopped beating within seconds (handlers/gateway.py).
CREATE TABLE owners (
    id           TEXT PRIMARY KEY,
    heartbeat_at TEXT NOT NULL
);
ALTER TABLE reservations ADD COLUMN owner TEXT;
CREATE INDEX reservations_owners ON reservations (owner) WHERE state = 'held';
