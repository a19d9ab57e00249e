-- The audit log: one row per administration change, written in the change's own transaction. `changes` is JSON:
-- {field: {"before": ..., "after": ...}}; never a secret. Kept audit.retention_days.
CREATE TABLE audit_log (
    id           text PRIMARY KEY,
    at           timestamptz NOT NULL,
    actor_key_id text,           -- NULL: the operator's CLI
    action       text NOT NULL,
    target_type  text NOT NULL,
    target_id    text NOT NULL,
    workspace_id text,
    changes      jsonb NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at, id);
CREATE INDEX audit_log_workspace ON audit_log (workspace_id, at, id);
