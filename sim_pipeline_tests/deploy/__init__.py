"""Tests of the production profile under deploy/: Postgres-backed instance, provider-limited queue, Celery executor."""
