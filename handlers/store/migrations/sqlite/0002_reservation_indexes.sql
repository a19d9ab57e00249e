-- Holds left by a process that died mid-request are found by age (release_stale), and a key's settled
-- spend since a date is summed when its budget period changes (update_key).
CREATE INDEX reservations_held ON reservations (created_at) WHERE state = 'held';
CREATE INDEX reservations_key_finished ON reservations (key_id, finished_at) WHERE state = 'settled';
