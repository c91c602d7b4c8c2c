"""The actors: one ServerClient per server connection (more arrive in later issues)."""
