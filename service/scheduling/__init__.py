"""The per-study scheduling step: ask, tell, front, settle; off the request path."""
