"""Sources: where events come from. Each module declares one source type, its config model and reader."""
