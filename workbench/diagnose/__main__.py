"""``python -m workbench.diagnose --table``: docs/diagnoses.md's rule table, from the registry."""

from __future__ import annotations

import argparse
import sys

from workbench.diagnose import registry  # the package registers every rule


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.diagnose", description=__doc__)
    p.add_argument("--table", action="store_true", help="print docs/diagnoses.md's rule table (Markdown) from the registry")
    args = p.parse_args(argv)
    if not args.table:
        p.print_help()
        return 2
    sys.stdout.write(registry.markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
