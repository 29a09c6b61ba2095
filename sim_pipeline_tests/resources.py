"""Test helpers for Dagster resources."""

from __future__ import annotations

from typing import Any, TypeVar

import dagster as dg

Resource = TypeVar("Resource", bound=dg.ConfigurableResource)


def replaced(resource: Resource, **changes: Any) -> Resource:
    """A new resource of the same class with some fields changed.

    Not pydantic's `model_copy(update=...)`: Dagster builds a resource at run time from the arguments it was
    constructed with, so a model_copy's changes are silently dropped (measured: a copied cache_dir never reached
    the asset, which wrote to the default data/cache instead)."""
    fields = {name: value for name, value in resource.__dict__.items() if name in type(resource).model_fields}
    return type(resource)(**{**fields, **changes})
