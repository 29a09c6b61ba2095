"""grade."""
