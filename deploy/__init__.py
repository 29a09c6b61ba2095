"""The production profile: Postgres-backed instance, Celery executor, provider-limited run queue (deploy/README-scale.md)."""
