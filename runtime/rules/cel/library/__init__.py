"""The custom CEL functions the rules call."""
