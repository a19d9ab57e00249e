-- Hourly usage, kept by the decision writer as it writes decision records (GET /v1/usage reads only this table).
CREATE TABLE usage_hourly (
    hour                TEXT NOT NULL,
    workspace_id        TEXT NOT NULL,
    key_id              TEXT NOT NULL,
    model               TEXT NOT NULL,
    upstream            TEXT NOT NULL,
    requests            INTEGER NOT NULL,
    errors              INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    cost                TEXT NOT NULL,
    PRIMARY KEY (hour, key_id, model, upstream)
);
CREATE INDEX usage_hourly_workspace ON usage_hourly (workspace_id, hour);
