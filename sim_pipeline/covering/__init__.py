"""Internals of step 02 (covering arrays); call sim_pipeline.cover instead."""
