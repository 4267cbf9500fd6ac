"""A study's folder on disk: its state, the one-driver lock and lease, portable paths, the records it keeps."""
