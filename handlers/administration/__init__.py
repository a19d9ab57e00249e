"""Administration: workspaces and relay keys (one implementation for the admin API and the CLI), and the
authentication of relay keys."""
