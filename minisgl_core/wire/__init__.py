"""The wire layer: the message schema (msgspec Structs, one tagged union per channel) and its
codec."""
