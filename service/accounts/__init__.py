"""Teams, tokens and who may do what."""
