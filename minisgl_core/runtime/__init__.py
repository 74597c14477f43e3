"""The service's process entry points: tokenizer, detokenizer and scheduler loops; the client."""
