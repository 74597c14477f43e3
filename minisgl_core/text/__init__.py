"""Text roles of the service: tokenization and incremental, streaming detokenization."""
