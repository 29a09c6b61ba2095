"""Step 03, the sandbox world: tools answer from seeded, per-entity state; faults hit one tool; an oracle labels.

Modules: `sandbox` (Sandbox, Event, statuses), `reads` (its read side), `arguments` (rejections, compiled
validators), `faults`, `setup` (WorldSetup, Fault), `state` (seeded tables, the `world` asset's table), `values`
(drawing values), `infer` (entities from bare schemas), `placeholder` (schema echoes), `oracle` (program labels),
`options` (WorldOptions).

How each world_state value acts (built by `search/situations.py`, played by the sandbox):
- entity_exists: the user's record is there and meets the write's `requires`.
- entity_missing: the user quotes an id no record has (a tool without the id: a lookup value no record has), so
  the call answers `not_found`.
- already_acted_on: the write's effect is already on the record (a delete: the record is gone), so the write
  answers `already_done`; for a write that makes a record (create, send), an identical record already exists.
- duplicate_entity: a twin record shares the lookup value, so a lookup finds two; the user's opening omits the id.
  A write that finds its record by lookup (no id argument) answers `rejected` / `ambiguous` and must not guess.
- partially_completed: the record carries `pending_action` (an earlier write half done); the write finishes it.
  For a read, the marker names the entity's first writing tool, so the read shows the half-done write.
- unknown: fields the write needs or sets (a read: the entity's enum fields) read `unknown`, and a write that
  depends on them answers `rejected` / `state_unknown`: the right move is to ask.
Where a value cannot act it plays as entity_exists: reads ignore already_acted_on; a create or a logged event
ignores every state but already_acted_on; a tool bound to no entity (no id, no noun, e.g. `search(query)`)
ignores them all; unknown hides nothing on an entity whose only field is its lookup field.
"""
