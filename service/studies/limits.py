"""Limits on what a client may send, shared by the service and the CLI (which checks a
document before sending it). No dependencies, so that the CLI imports it cheaply."""

MAX_BODY_BYTES = 1_000_000  # a request body (a study document, a result)
MAX_DEPTH = 24  # nesting of a study document
MAX_YAML_ALIASES = 200  # YAML aliases (*name) in a document the CLI loads
