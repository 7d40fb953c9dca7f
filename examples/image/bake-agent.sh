#!/bin/sh
# Bake the navarch agent into a machine image: the bundle and its systemd units, nothing
# else (no pip, no package). Run as root on the image builder, e.g. by Packer's shell
# provisioner (navarch-agent.pkr.hcl) after `navarch agent bundle` and the units were
# uploaded to SRC. Pools launched from the image set `agent_baked: true`: their user-data
# then only writes /etc/navarch/agent.yaml (the node's key) and starts the timer.
#   sh bake-agent.sh [SRC]            SRC: directory with navarch-agent.pyz and the units
set -eu
# NAVARCH_ROOT: a scratch root for tests of this script; empty on the builder.
ROOT="${NAVARCH_ROOT:-}"
SRC="${1:-/tmp/navarch}"

python3 -I -S -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
  || { echo "navarch: the agent needs python3 >= 3.9 on the image" >&2; exit 1; }
install -d -m 0755 "$ROOT/usr/local/lib/navarch" "$ROOT/etc/systemd/system"
install -d -m 0700 "$ROOT/etc/navarch" "$ROOT/var/lib/navarch"
install -m 0755 "$SRC/navarch-agent.pyz" "$ROOT/usr/local/lib/navarch/navarch-agent.pyz"
install -m 0644 "$SRC/navarch-agent.service" "$SRC/navarch-agent.timer" "$ROOT/etc/systemd/system/"
# The bundle starts on this image's own python3 (no config or GPU on the builder yet).
python3 -I -S "$ROOT/usr/local/lib/navarch/navarch-agent.pyz" run --help >/dev/null
echo "navarch: agent baked ($(sha256sum "$ROOT/usr/local/lib/navarch/navarch-agent.pyz" | cut -d' ' -f1))"
