"""bench_tasks.py's FastMCP column, in the fastmcp-tasks venv: prints one JSON object.

Run by bench_tasks.py (never needs to be run by hand)::

    .venv-fastmcp-tasks/bin/python benchmarks/_tasks_fastmcp_worker.py --transport http --url U \
        --calls N --total N --inflight N --warmup N
    .venv-fastmcp-tasks/bin/python benchmarks/_tasks_fastmcp_worker.py --transport stdio --server PATH ...

Two clients, one after the other, each making the same ``quick {"x": "a"}`` call:

plain  ``fastmcp.Client`` without the internal extensions (``_auto_internal_extensions``
       False): the tasks extension is not advertised, so the server answers inline;
task   ``fastmcp.Client`` with ``fastmcp_tasks`` imported: its ``TasksClientExtension``
       opts every request in, and its result claim polls ``tasks/get`` until the task
       ends (first poll at once, then a backoff from 20 ms up to ``pollIntervalMs``).

Every ``tasks/get`` it sends is counted (a wrapper around ``fastmcp_tasks.client._send_get``).
Only the standard library at the top: the rest is imported where used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

ARGS = {"x": "a"}


def check(result: object) -> None:
    text = result.content[0].text  # type: ignore[attr-defined]
    if text != "quick a":
        raise RuntimeError(f"quick answered {text!r}")


async def measure(opts: argparse.Namespace, tasked: bool, gets: list[int]) -> dict[str, object]:
    import fastmcp
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

    class PlainClient(fastmcp.Client):
        _auto_internal_extensions = False  # no tasks extension advertised: every call inline

    if opts.transport == "stdio":
        transport: object = StdioTransport(command=sys.executable, args=[opts.server, "stdio"])
    else:
        transport = StreamableHttpTransport(opts.url)
    client = (fastmcp.Client if tasked else PlainClient)(transport)
    t0 = time.perf_counter()
    await client.__aenter__()
    try:
        connect_s = time.perf_counter() - t0
        version = getattr(client, "protocol_version", None)
        version = version() if callable(version) else version
        before = gets[0]
        check(await client.call_tool("quick", ARGS))
        ran_as_task = gets[0] > before
        for _ in range(opts.warmup):
            await client.call_tool("quick", ARGS)
        clock = time.perf_counter_ns
        latencies = []
        gets0 = gets[0]
        for _ in range(opts.calls):
            t = clock()
            await client.call_tool("quick", ARGS)
            latencies.append(clock() - t)
        polls = (gets[0] - gets0) / opts.calls

        async def worker(n: int) -> None:
            for _ in range(n):
                await client.call_tool("quick", ARGS)

        shares = [opts.total // opts.inflight + (1 if i < opts.total % opts.inflight else 0) for i in range(opts.inflight)]
        t = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in shares))
        throughput = opts.total / (time.perf_counter() - t)
    finally:
        await client.__aexit__(None, None, None)
    return {"era": str(version), "ran_as_task": ran_as_task, "latencies_ns": latencies, "throughput": throughput,
            "gets_per_call": polls, "connect_s": connect_s}


async def amain(opts: argparse.Namespace) -> dict[str, object]:
    import fastmcp_tasks.client as tasks_client  # registers the tasks extension for fastmcp.Client

    gets = [0]
    send_get = tasks_client._send_get

    async def counted(*args: object, **kwargs: object) -> object:
        gets[0] += 1
        return await send_get(*args, **kwargs)

    tasks_client._send_get = counted  # _drive_to_terminal looks it up at each poll
    from importlib.metadata import version

    out: dict[str, object] = {"fastmcp": version("fastmcp-slim"), "fastmcp_tasks": version("fastmcp-tasks")}
    out["plain"] = await measure(opts, False, gets)
    out["task"] = await measure(opts, True, gets)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("http", "stdio"), required=True)
    parser.add_argument("--url", default="")
    parser.add_argument("--server", default="")
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--total", type=int, required=True)
    parser.add_argument("--inflight", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    opts = parser.parse_args()
    print(json.dumps(asyncio.run(amain(opts))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
