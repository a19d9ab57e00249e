-- GET /v1/route/decisions filters records by model and outcome and pages them newest first, per workspace or key.
-- `model` is the one GET /v1/usage groups by: the model that answered, else the one routed to, else the one asked
-- for ('' for none).
ALTER TABLE decisions ADD COLUMN model TEXT;
ALTER TABLE decisions ADD COLUMN outcome TEXT;
UPDATE decisions SET
    model = COALESCE(NULLIF(json_extract(record, '$.model'), ''), NULLIF(json_extract(record, '$.candidates[0].model'), ''),
                     json_extract(record, '$.requested_model'), ''),
    outcome = json_extract(record, '$.outcome');
CREATE INDEX decisions_workspace_created ON decisions (workspace_id, created_at, id);
CREATE INDEX decisions_key_created ON decisions (key_id, created_at, id);
