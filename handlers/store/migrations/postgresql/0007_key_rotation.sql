-- Key rotation: a new secret for the same key (id, limits, spend), the previous one valid until a grace period ends.
-- Only the previous secret's hash is kept, like the current one's.
ALTER TABLE keys ADD COLUMN previous_secret_hash text;
ALTER TABLE keys ADD COLUMN previous_expires_at timestamptz;
ALTER TABLE keys ADD COLUMN rotated_at timestamptz;
CREATE INDEX keys_previous_secret_hash ON keys (previous_secret_hash) WHERE previous_secret_hash IS NOT NULL;
