"""Settings declared once (settings), read from study files (reader) and offered as CLI flags (flags)."""
