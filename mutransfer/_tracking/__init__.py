"""MLflow tracking: the study's runs, the UI's views, the listings of studies in a store."""
