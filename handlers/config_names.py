"""Where the configuration is found, and how a bad one is refused, without loading anything that reads it (the
CLI's parser and its error handling need these names)."""

ENV_CONFIG = "SPECWAY_CONFIG"
ENV_PREFIX = "SPECWAY_"  # SPECWAY_SERVER__PORT=9000 sets server.port (docs/configuration.md lists every name)
ENV_SUPERVISOR = "SPECWAY_SUPERVISOR"  # the pid of `specway serve`'s supervisor, in its workers (reloads)
DEFAULT_FILE = "specway.yaml"  # read from the working folder when no file is named


class ConfigError(Exception):
    """A configuration file or variable that cannot be used; the message names it, the path inside it and why."""
