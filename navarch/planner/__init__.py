"""The pure planner: desired state, observations and a clock in, a plan out; no I/O.

``observe`` turns inventory, reports and memory into one view per node; ``plan`` runs the
pool stages (repair, spares, acceptance, capacity, drift, retire, ...) and the fleet stages
over those views and returns the actions with their halts; ``model`` holds the types.
Where each decision lives: docs/design.md, The planner's stages.
"""
