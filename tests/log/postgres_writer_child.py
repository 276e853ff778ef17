"""One of the writers of tests/log/test_postgres_crash.py: appends ``count``
events, one per call, to session ``shared``, and prints the ones acknowledged
(their numbers, one line each) as it goes.

Keyed (``keyed`` = 1), each append carries its own key and is retried with it
after any outage until it is acknowledged: exactly once. Unkeyed, an append
that fails is given up, never retried blind (its outcome may be unknown).
"""

from __future__ import annotations

import sys
import time

from agentlog import PostgresCheckpointer, StorageUnavailableError


def main() -> None:
    conninfo, schema, worker, count, keyed = sys.argv[1:6]
    log = PostgresCheckpointer(
        conninfo,
        schema=schema,
        pool_max_size=1,
        pool_timeout=2.0,
        connect_timeout=2.0,
        client_timeout=10.0,
        create=False,
    )
    for n in range(int(count)):
        event = {"type": "user", "content": f"{worker}-{n}", "w": int(worker), "n": n}
        key = f"w{worker}-{n}" if keyed == "1" else None
        give_up = time.monotonic() + 120
        while True:
            try:
                log.append("shared", [event], key=key)
            except StorageUnavailableError:
                if key is None or time.monotonic() > give_up:
                    break
                time.sleep(0.05)  # the server is restarting: the key makes a retry safe
                continue
            print(n, flush=True)
            break
    log.close()


if __name__ == "__main__":
    main()
