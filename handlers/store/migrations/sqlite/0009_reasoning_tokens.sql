-- Usage rollups count the models' reasoning apart (part of output_tokens), as the decision records do.
ALTER TABLE usage_hourly ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
