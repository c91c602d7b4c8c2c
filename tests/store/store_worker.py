"""A second process using the store, for the store tests: python store_worker.py MODE HOME URL [ARGS].

URL "-" means SQLite in HOME. Prints "ready", waits for a line on stdin, then works.
"""

from __future__ import annotations

import dataclasses
import sys

from albedo_actors.store import Credentials, open_store


def main() -> None:
    mode, home, url, *args = sys.argv[1:]
    store = open_store(home, None if url == "-" else url)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        if mode == "updates":  # TAG N SHARED OWN: N interleaved updates to SHARED and OWN
            tag, n, shared, own = args[0], int(args[1]), args[2], args[3]
            for i in range(n):
                for server in (shared, own):
                    key = f"{tag}_{i}"
                    store.update_credentials(
                        server, lambda c, key=key, i=i: dataclasses.replace(c, env={**c.env, key: str(i)}))
        elif mode == "torn":  # SERVER: write consistent records forever, until killed
            server = args[0]
            i = 0
            while True:
                i += 1
                store.put_credentials(server, Credentials(
                    bearer_token=f"tok-{i}", header=("X-Seq", str(i)),
                    env={"SEQ": str(i), "PAD": "x" * (i % 50)}, oauth={"seq": i, "tokens": [i] * (i % 7)}))
                store.save_catalogue(server, f"fp-{i}", f"era-{i}",
                                     {"seq": i, "tools": [{"name": f"t{i}-{k}"} for k in range(i % 40)]})
                if i % 10 == 0:
                    print(i, flush=True)
        elif mode == "put":  # SERVER TOKEN
            store.put_credentials(args[0], Credentials(bearer_token=args[1]))
            store.save_catalogue(args[0], "fp", "2026-07-28", {"tools": [{"name": args[1]}]})
        elif mode == "get":  # SERVER: print the token
            print(store.get_credentials(args[0]).bearer_token, flush=True)
        elif mode == "open":
            print(",".join(map(str, store.migrations_applied)), flush=True)
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
