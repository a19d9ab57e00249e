"""Inference: the canonical conversation, routing (an immutable Plan), the relay and its Trace, and the two kinds of
adapter it meets: formats/ (one module per wire format, both directions) and upstreams/ (transport only)."""
