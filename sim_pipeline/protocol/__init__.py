"""The shared vocabulary every step imports: rollout and tool-result statuses, user decisions, harness markers, and
`classify_reply`, the one place an agent's text is read. A leaf: it imports nothing else from sim_pipeline."""
