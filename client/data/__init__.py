"""Data access that runs on the workers: chunks of NanoAOD files, open files, freshness, chunks served from the cache."""
