-- Money is TEXT holding a Decimal's exact string (a NUMERIC column would turn it into a float).
-- Times are ISO-8601 UTC text with microseconds ("2025-01-31T23:59:59.000000+00:00"): they sort as they compare.

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    credit      TEXT NOT NULL DEFAULT '0',
    reserved    TEXT NOT NULL DEFAULT '0',
    spend_total TEXT NOT NULL DEFAULT '0',
    created_at  TEXT NOT NULL
);

CREATE TABLE keys (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    name          TEXT NOT NULL,
    secret_hash   TEXT NOT NULL,  -- sha256 hex of the secret; the secret itself is never stored
    hint          TEXT NOT NULL,
    scopes        TEXT NOT NULL,  -- JSON array
    models        TEXT,           -- JSON array, NULL = every model
    policy        TEXT,
    expires_at    TEXT,
    created_at    TEXT NOT NULL,
    last_used_at  TEXT,
    revoked_at    TEXT,
    budget        TEXT,
    budget_period TEXT NOT NULL DEFAULT 'total' CHECK (budget_period IN ('total', 'daily', 'monthly')),
    rpm           INTEGER,
    tpm           INTEGER,
    spend_total   TEXT NOT NULL DEFAULT '0',
    spend_period  TEXT NOT NULL DEFAULT '0',
    period_start  TEXT,
    reserved      TEXT NOT NULL DEFAULT '0'
);
CREATE UNIQUE INDEX keys_secret_hash ON keys (secret_hash);
CREATE INDEX keys_workspace ON keys (workspace_id);

CREATE TABLE reservations (
    id           TEXT PRIMARY KEY,
    key_id       TEXT NOT NULL REFERENCES keys (id),
    workspace_id TEXT NOT NULL REFERENCES workspaces (id),
    amount       TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'settled', 'released')),
    cost         TEXT,
    created_at   TEXT NOT NULL,
    finished_at  TEXT
);

CREATE TABLE decisions (
    id           TEXT PRIMARY KEY,
    created_at   TEXT NOT NULL,
    workspace_id TEXT,
    key_id       TEXT,
    record       TEXT NOT NULL  -- the whole record as JSON
);
CREATE INDEX decisions_created ON decisions (created_at);
