"""`sim-pipeline view`: the warehouse of a domain as one self-contained HTML file (decision, curves, slices, world
fit, judge trust, cuts, and every transcript with filters)."""
