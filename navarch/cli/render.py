"""`navarch render cloud-init`: print the text navarch sends to machines (api.cloud_init)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from navarch.cli.plumbing import EXIT_ERROR, EXIT_OK
from navarch.errors import NavarchError

__all__ = ["register"]


def cmd_render_cloud_init(args: argparse.Namespace) -> int:
    """`navarch render cloud-init FLEET --pool P [--node N] [--reveal-key]`: print the
    user-data a node of the pool boots with (N defaults to <fleet>-<pool>-0001, the pool's
    first node), its signing key replaced by bootstrap.KEY_PLACEHOLDER unless --reveal-key."""
    from navarch import api
    from navarch.api.reading import cloud_init

    try:
        fleet = api.load_fleet(args.fleet)
        if args.pool not in {p.name for p in fleet.spec.pools}:
            names = ", ".join(p.name for p in fleet.spec.pools)
            print(
                f"navarch render cloud-init: no pool {args.pool!r} in {args.fleet} "
                f"(pools: {names})",
                file=sys.stderr,
            )
            return EXIT_ERROR
        made = cloud_init(
            fleet,
            args.pool,
            args.node,
            reveal_key=args.reveal_key,
            bundle_url=args.bundle_url,
        )
        sys.stdout.write(made.text)
        if not made.key_shown:
            print(
                f"navarch render cloud-init: {made.node}'s key is a placeholder; "
                "--reveal-key prints it (it lets its holder sign that node's reports)",
                file=sys.stderr,
            )
    except NavarchError as exc:
        print(f"navarch render cloud-init: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def register(sub: Any) -> None:
    """Add `navarch render cloud-init` to navarch's subparsers."""
    render = sub.add_parser("render", help="print text navarch sends to machines")
    rsub = render.add_subparsers(dest="render_command", required=True, metavar="WHAT")
    s = rsub.add_parser("cloud-init", help="the cloud-init user-data of a node of a pool")
    s.add_argument("fleet", metavar="FLEET", help="path to fleet.yaml")
    s.add_argument("--pool", required=True, help="pool name")
    s.add_argument("--node", help="node name (default <fleet>-<pool>-0001, the pool's first node)")
    s.add_argument(
        "--bundle-url",
        metavar="URL",
        help="where nodes fetch `navarch agent bundle`'s file (default: publish it "
        "to the fleet's store and use a pre-signed URL, as apply does)",
    )
    s.add_argument(
        "--reveal-key",
        action="store_true",
        help="print the node's signing key (default: a placeholder stands for it)",
    )
    s.set_defaults(func=cmd_render_cloud_init)
