"""Serving a trained target: load it (study or MLflow URI), evaluate it on data, write predictions."""
