-- The audit log: one row per administration change, written in the change's own transaction. `changes` is JSON:
-- {field: {"before": ..., "after": ...}}; never a secret. Kept audit.retention_days.
CREATE TABLE audit_log (
    id           TEXT PRIMARY KEY,
    at           TEXT NOT NULL,
    actor_key_id TEXT,           -- NULL: the operator's CLI
    action       TEXT NOT NULL,
    target_type  TEXT NOT NULL,
    target_id    TEXT NOT NULL,
    workspace_id TEXT,
    changes      TEXT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at, id);
CREATE INDEX audit_log_workspace ON audit_log (workspace_id, at, id);
