"""The specway command: serve, keys, workspaces, db, generate."""
