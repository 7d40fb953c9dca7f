"""The operator's verbs: a person (or an MCP client on a person's confirmation) acting on
the fleet by name, outside the planner's own decisions.

- manual: `navarch reboot` and `navarch cordon` of one node, and what every verb shares
  (who acted, the lease's command);
- uncordon: `navarch uncordon`, the path back to service (only undo what navarch or an
  operator's cordon did);
- pause: `navarch pause` and `navarch resume` of the whole fleet.

Each holds the fleet's lease (navarch.reconcile.run.leased), looks at the world as a run
would, and writes what it did to the audit log with who acted. navarch.api is their one
caller; the CLI and the MCP server reach them only through it. Import the verbs
from their modules (navarch.reconcile.operator.uncordon.uncordon, ...).
"""
