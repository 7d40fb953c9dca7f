"""`navarch simulate`: the real reconcile run on a virtual clock against a simulated world."""
