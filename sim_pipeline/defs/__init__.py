"""Dagster wiring: partitions, IO, resources, assets, checks, automation."""

import warnings

import dagster as dg

# Partition mappings across dimensions and partitioned checks are beta/preview in Dagster 1.13; we rely on them
# knowingly (DESIGN.md), so their warnings would only be noise in every run's log.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
