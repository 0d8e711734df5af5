"""Studies: documents, creation and lifecycle."""
