-- Hourly usage, kept by the decision writer as it writes decision records (GET /v1/usage reads only this table).
CREATE TABLE usage_hourly (
    hour                timestamptz NOT NULL,
    workspace_id        text NOT NULL,
    key_id              text NOT NULL,
    model               text NOT NULL,
    upstream            text NOT NULL,
    requests            bigint NOT NULL,
    errors              bigint NOT NULL,
    input_tokens        bigint NOT NULL,
    output_tokens       bigint NOT NULL,
    cached_input_tokens bigint NOT NULL,
    cache_write_tokens  bigint NOT NULL,
    cost                numeric NOT NULL,
    PRIMARY KEY (hour, key_id, model, upstream)
);
CREATE INDEX usage_hourly_workspace ON usage_hourly (workspace_id, hour);
