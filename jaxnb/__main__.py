"""``python -m jaxnb list`` and ``python -m jaxnb stop NAME``: the named clusters of this machine,
from a terminal (as ``%jax_cluster list`` and ``%jax_cluster stop`` in a notebook).
``python -m jaxnb hold NAME`` is what ``%jax_cluster attach NAME --via HOST`` runs on HOST."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command; the exit status (1: no cluster of that name, 2: a wrong command line)."""
    parser = argparse.ArgumentParser(prog="python -m jaxnb", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    listed = commands.add_parser("list", help="the named clusters running on this machine")
    listed.add_argument("--json", action="store_true", help="as JSON, one list (what "
                        "`%%jax_cluster list --via HOST` reads)")
    stop = commands.add_parser("stop", help="stop the named cluster NAME (nothing is left running)")
    stop.add_argument("name", metavar="NAME")
    hold = commands.add_parser("hold", help="what `%%jax_cluster attach NAME --via HOST` runs on "
                               "HOST over ssh: take NAME over for that kernel, print its "
                               "connection as JSON, hold it until stdin ends")
    hold.add_argument("name", metavar="NAME")
    args = parser.parse_args(argv)
    from jaxnb._attach import attachment, listing
    from jaxnb._core import cluster_names as names

    if args.command == "list":
        found = listing.clusters()
        print(json.dumps(found) if args.json else listing.table(found))
        return 0
    try:
        names.check(args.name)
    except ValueError as exc:
        parser.error(str(exc))
    if args.command == "hold":
        from jaxnb._attach import hold as holding

        return holding.main(args.name)
    if not attachment.stop(args.name):
        print(f"jaxnb: no cluster named {args.name!r} runs on this machine; "
              "`python -m jaxnb list` shows those that do", file=sys.stderr)
        return 1
    print(f"jaxnb: cluster {args.name!r} stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
