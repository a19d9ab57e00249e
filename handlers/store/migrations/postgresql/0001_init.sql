CREATE TABLE workspaces (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    credit      numeric NOT NULL DEFAULT 0,
    reserved    numeric NOT NULL DEFAULT 0,
    spend_total numeric NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL
);

CREATE TABLE keys (
    id            text PRIMARY KEY,
    workspace_id  text NOT NULL REFERENCES workspaces (id),
    name          text NOT NULL,
    secret_hash   text NOT NULL,  -- sha256 hex of the secret; the secret itself is never stored
    hint          text NOT NULL,
    scopes        jsonb NOT NULL,
    models        jsonb,          -- NULL = every model
    policy        text,
    expires_at    timestamptz,
    created_at    timestamptz NOT NULL,
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    budget        numeric,
    budget_period text NOT NULL DEFAULT 'total' CHECK (budget_period IN ('total', 'daily', 'monthly')),
    rpm           integer,
    tpm           integer,
    spend_total   numeric NOT NULL DEFAULT 0,
    spend_period  numeric NOT NULL DEFAULT 0,
    period_start  timestamptz,
    reserved      numeric NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX keys_secret_hash ON keys (secret_hash);
CREATE INDEX keys_workspace ON keys (workspace_id);

CREATE TABLE reservations (
    id           text PRIMARY KEY,
    key_id       text NOT NULL REFERENCES keys (id),
    workspace_id text NOT NULL REFERENCES workspaces (id),
    amount       numeric NOT NULL,
    state        text NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'settled', 'released')),
    cost         numeric,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz
);

CREATE TABLE decisions (
    id           text PRIMARY KEY,
    created_at   timestamptz NOT NULL,
    workspace_id text,
    key_id       text,
    record       jsonb NOT NULL
);
CREATE INDEX decisions_created ON decisions (created_at);
