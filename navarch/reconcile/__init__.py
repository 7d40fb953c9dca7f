"""The reconciler: every run's I/O around the pure planner (`plan`, `apply`, `status`, and
the operator's verbs), and the executor, the only code that changes the world.

run           gather (inventory, Memory, reports, drain checks -> observe -> plan) and apply
executor      the engine: one chain per node, thread pools per provider, journaled Memory
handlers      one handler per action kind; provisioning holds the provision fail-over
updates       what a handler returns beside its Outcome (navarch.outcome): Memory -> Memory
state         Memory (CAS), the lease, the audit log in chunks, object keys in the store
codec         Memory <-> state/<fleet>.json, and the node-entry cache
reports       read, verify and summarise node health reports; report_cache by store version
status        fleet status as a typed value (schemas/status.schema.json); status_text: as text
render        the plan as text, markdown and JSON (schemas/plan.schema.json)
operator      the operator's verbs: cordon, reboot, uncordon (the way back), pause, resume
publish       the agent bundle in the fleet's store, handed to new nodes by URL
collector     the garbage collector around gather() in a one-shot command
"""
