"""Inference: the canonical conversation, routing (an immutable Plan), the Trace of what happened, and the two kinds of
adapter it meets: formats/ (one module per wire format, both directions) and upstreams/ (transport only)."""
