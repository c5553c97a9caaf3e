"""A process that dies inside an exactly-once call: run as
`python drivers_crash_child.py KIND SCOPE APP`. Its function claims the call and writes on
the caller's connection (named APP), says "written" with what its transaction saw, waits for
a line on stdin, and the process ends with os._exit(3): no rollback, no commit, no close."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from drivers_kinds import KINDS, exactly_once


def main() -> None:
    kind_name, scope, app = sys.argv[1:4]
    kind = KINDS[kind_name]

    def die(h: Any, item: str) -> None:
        print(json.dumps({"written": item, "claim": seen[-1]}), flush=True)
        sys.stdin.readline()
        os._exit(3)

    fn, _, seen = exactly_once(kind, scope, hook=die)

    async def run() -> None:
        async with kind.connect(app) as h:
            await kind.call(fn, h, "a")

    asyncio.run(run())
    sys.exit("the function returned: the process was to end inside it")


if __name__ == "__main__":
    main()
