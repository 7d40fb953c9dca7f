"""One reconcile run (`plan`, `apply`, `status`, `uncordon`) around the pure planner.

run        gather (inventory, Memory, reports, drain checks -> observe -> plan) and apply
executor   the only code that changes the world: one outcome per action
state      Memory (CAS), the lock, the audit log, object keys in the store
reports    read, verify and summarise node health reports
render     the plan as text, markdown and JSON (schemas/plan.schema.json)
operator   the operator's verbs: cordon, reboot, uncordon (the way back), pause, resume
status_text  `navarch status` as text, from the typed FleetStatus (status)
"""
