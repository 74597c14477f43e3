"""The wire layer: the message schema (msgspec Structs, one tagged union per channel), its
codec, and the helpers transports share."""
