"""fleet.yaml to the desired state (FleetSpec): everything that reads the declaration.

``load`` turns the file into a ``spec.FleetSpec``; ``text`` reads its YAML with a line for
every key path; ``schemas`` holds the JSON Schemas and a schema error in words; ``secret``
finds the fleet secret; ``confine`` bounds which files a candidate file may open;
``policy`` (CEL health rules), ``remedies`` (the remediation table), ``acceptance`` and
``groups`` check the pool sections that need more than a schema; ``durations`` reads
"90s", "5m" and "1d".
"""
