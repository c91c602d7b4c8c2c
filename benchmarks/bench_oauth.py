#!/usr/bin/env python3
"""Benchmark OAuth: sign-in, authorized calls and token refresh, ours against the official SDK.

One real ``tests/servers/oauth_server.py --json-response`` process (a loopback OAuth 2.1
authorization server that approves at once, plus the SDK peer MCP server behind
Bearer auth, on 127.0.0.1) serves the whole run. In each of ``--rounds`` rounds,
clients take turns (rotating order), one at a time:

1. sign-in, ``--signins`` times per client, each with a fresh client and fresh token
   storage (so every one registers a new client): probe 401 -> protected resource
   metadata -> authorization server metadata -> dynamic registration -> authorization
   request (GET, 302 read without following) -> token request.
   ours  ``SignIn(config, store, agent=follow_redirect_agent(), port=0).run()`` on a
         fresh SQLite store (opened and closed outside the timing); "to token" ends when
         run() returns (the registration and the tokens are written durably); then
         "to tools/list": ``ServerHandle.start(..., auth=ServerAuth(...))`` +
         ``connect()`` (discover, tools, resources, templates, prompts).
   sdk   ``OAuthClientProvider`` on a fresh in-memory ``TokenStorage``, in the
         ``httpx2`` client of ``streamable_http_client`` + ``ClientSession``; its
         ``server/discover`` POST is the probe. The redirect handler GETs the
         authorization URL without following it; the callback handler returns code,
         state and iss from the ``Location``. "to token": until the provider stores its
         tokens; "to tools/list": until ``discover`` is retried with the token and
         ``tools/list`` is answered.
2. sequential ``tools/call echo`` latency, ``--calls`` calls per client and round on a
   fresh connection, all clients signed in already:
   ours     ``ServerHandle`` with ``auth=ServerAuth(config, store, refresh_by(TokenRefresher))``;
   sdk      ``ClientSession`` whose ``httpx2`` client has the ``OAuthClientProvider``
            (already holding tokens) as its auth;
   sdk-hdr  ``ClientSession`` whose ``httpx2`` client sends the bearer token as a
            static ``Authorization`` header (no auth hook);
   raw      one ``requests.Session`` posting the JSON-RPC with the bearer header and the
            modern headers ours sends (``bench_http.RawHttpClient``).
3. refresh: ``POST /admin/expire`` (every access token dead, the client does not know),
   then the time to one successful call (ours: 401 -> one refresh -> post again), and
   the token requests made when 8 callers hit the dead token at once. The SDK is
   measured both on that path (it answers a 401 with a new authorization, not a
   refresh) and with the expiry known locally (its ``token_expiry_time`` set in the
   past: it refreshes before sending).

Run: ``.venv/bin/python benchmarks/bench_oauth.py [--rounds N]``. See docs/operations.rst ("Speed").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import _common  # benchmarks/_common.py; it also puts the checkout first on sys.path
from _common import ARGS, REPO, Figures, check_echo, cpu_ns, progress, ratio

sys.path.insert(0, os.path.join(REPO, "tests"))
from helpers import OAUTH_SERVER, OAuthServer  # noqa: E402  (tests/helpers.py)

from bench_http import RawBench, RawHttpClient  # noqa: E402

from albedo_actors.actors.client import ServerHandle  # noqa: E402
from albedo_actors.auth.server_auth import ServerAuth  # noqa: E402
from albedo_actors.actors.refresher import TokenRefresher, refresh_by
from albedo_actors.auth.signin import SignIn, follow_redirect_agent  # noqa: E402
from albedo_actors.config import ServerConfig  # noqa: E402
from albedo_actors.store import open_store  # noqa: E402

NAME = "bench"
DEFAULT_ROUNDS = 5
SDK_TIMEOUT = 30.0  # every SDK operation is bounded by this
CONCURRENT = 8


def stats_delta(server: OAuthServer, before: dict) -> dict[str, int]:
    after = server.stats()
    out = {k: after["token_requests"][k] - before["token_requests"][k] for k in after["token_requests"]}
    for key in ("registrations", "authorize_requests", "mcp_requests_unauthorized"):
        out[key] = after[key] - before[key]
    return out


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- the SDK's OAuth client, driven without a browser ------------------------------------------


class MemoryStorage:
    """The SDK's ``TokenStorage`` in memory; notes when tokens were first stored."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None
        self.first_tokens_at: float | None = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        if self.first_tokens_at is None:
            self.first_tokens_at = time.perf_counter()
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


class SdkOAuth:
    """An ``OAuthClientProvider`` whose redirect handler GETs the authorization URL without
    following the redirect (fresh ``httpx2`` client, as ours' agent uses a fresh
    ``AuthHttp``) and whose callback handler returns code/state/iss from the Location."""

    REDIRECT_URI = "http://127.0.0.1:33419/callback"  # registered, never connected to

    def __init__(self, url: str) -> None:
        from mcp.client.auth import OAuthClientProvider
        from mcp.shared.auth import OAuthClientMetadata

        self.storage = MemoryStorage()
        self._location: str | None = None
        self.provider = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                client_name="sdk-bench", redirect_uris=[self.REDIRECT_URI],
                grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            ),
            storage=self.storage,
            redirect_handler=self._redirect,
            callback_handler=self._callback,
        )

    async def _redirect(self, url: str) -> None:
        import httpx2

        async with httpx2.AsyncClient(follow_redirects=False, trust_env=False, timeout=10) as client:
            reply = await client.get(url, headers={"Accept": "text/html"})
        if not (300 <= reply.status_code < 400) or "location" not in reply.headers:
            raise RuntimeError(f"the authorization request answered HTTP {reply.status_code}, not a redirect")
        self._location = reply.headers["location"]

    async def _callback(self) -> Any:
        from mcp.shared.auth import AuthorizationCodeResult

        query = dict(parse_qsl(urlsplit(self._location or "").query))
        self._location = None
        if "code" not in query:
            raise RuntimeError(f"the redirect carried no code: {sorted(query)}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


@contextlib.asynccontextmanager
async def sdk_transport(url: str, **client_kwargs: Any):
    """``streamable_http_client`` over an ``httpx2`` client made (and closed) here."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(**client_kwargs) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            yield streams


# -- the clients of the latency phase ------------------------------------------------------------


class OursAuthBench(_common.OursBench):
    def __init__(self, config: ServerConfig, home: str, store: Any, refresher: Any) -> None:
        super().__init__(config, home)
        self.store, self.refresher = store, refresher

    async def open(self) -> None:
        auth = ServerAuth(self.config, self.store, refresh_by(self.refresher))
        self.handle = ServerHandle.start(self.config, self.home, auth=auth)
        self.handle.connect(timeout=SDK_TIMEOUT)


class SdkBench(_common.SdkBench):
    def __init__(self, name: str, transport: Any) -> None:
        super().__init__(transport)
        self.name = name

    async def open(self) -> None:
        async with asyncio.timeout(SDK_TIMEOUT):  # in this task: the transport's scopes are entered here
            await super().open()


class RawAuthBench(RawBench):
    """bench_http's raw client with the bearer header on its session."""

    def __init__(self, url: str, token: Any) -> None:
        super().__init__(url, False)
        self.token = token  # a callable: the token valid now

    async def open(self) -> None:
        self.client = RawHttpClient(self.url, False)
        self.client.session.headers["Authorization"] = f"Bearer {self.token()}"
        self.opened_as = self.client.open(timeout=SDK_TIMEOUT)
        self.client.request("tools/list", timeout=SDK_TIMEOUT)


# -- the run ---------------------------------------------------------------------------------------


class Run:
    def __init__(self, opts: argparse.Namespace, server: OAuthServer, top: str) -> None:
        self.opts = opts
        self.server = server
        self.top = top
        self.config = ServerConfig(name=NAME, type="http", url=server.url)
        self.n_homes = 0
        # sign-in: ms per sign-in
        self.to_token: dict[str, list[float]] = {"ours": [], "sdk": []}
        self.to_list: dict[str, list[float]] = {"ours": [], "sdk": []}
        self.signin_requests: dict[str, list[dict]] = {"ours": [], "sdk": []}
        # latency
        self.figs: dict[str, Figures] = {n: Figures(n) for n in ("ours", "sdk", "sdk-hdr", "raw")}
        # refresh: path -> ms per expiry; counts per concurrent burst
        self.refresh_ms: dict[str, list[float]] = {"ours": [], "sdk": [], "sdk-known": []}
        self.refresh_requests: dict[str, list[dict]] = {"ours": [], "sdk": [], "sdk-known": []}
        self.burst_ms: dict[str, list[float]] = {"ours": [], "sdk": [], "sdk-known": []}
        self.burst_requests: dict[str, list[dict]] = {"ours": [], "sdk": [], "sdk-known": []}
        self.ours_refresher_requests: list[int] = []
        # the signed-in clients of phases 2 and 3
        self.home = self.new_home()
        self.store = open_store(self.home)
        self.refresher = TokenRefresher.start(self.store, environ={})
        self.sdk = SdkOAuth(server.url)

    def new_home(self) -> str:
        self.n_homes += 1
        path = os.path.join(self.top, f"home{self.n_homes}")
        os.mkdir(path)
        return path

    def ours_token(self) -> str:
        return self.store.get_credentials(NAME).oauth["access_token"]

    def close(self) -> None:
        try:
            self.refresher.stop()
        finally:
            self.store.close()

    # -- setup: every long-lived client signed in (untimed) -----------------------------------

    async def setup(self) -> None:
        SignIn(self.config, self.store, environ={}, agent=follow_redirect_agent(), port=0, lifetime=30).run()
        async with sdk_transport(self.server.url, auth=self.sdk.provider) as (read, write):
            from mcp.client.session import ClientSession

            async with ClientSession(read, write) as session:
                await asyncio.wait_for(_common.sdk_negotiate(session), SDK_TIMEOUT)

    # -- 1. sign-in ------------------------------------------------------------------------------------

    async def signin_ours(self) -> None:
        home = self.new_home()
        store = open_store(home)
        refresher = TokenRefresher.start(store, environ={})
        handle = None
        try:
            gc.collect()
            before = self.server.stats()
            t0 = time.perf_counter()
            record = SignIn(self.config, store, environ={}, agent=follow_redirect_agent(), port=0, lifetime=30).run()
            t1 = time.perf_counter()
            handle = ServerHandle.start(self.config, home, auth=ServerAuth(self.config, store, refresh_by(refresher)))
            handle.connect(timeout=SDK_TIMEOUT)
            t2 = time.perf_counter()
            if record.state != "signed_in":
                raise RuntimeError(f"ours: sign-in ended {record.state}")
            check_echo(handle.call_tool("echo", ARGS))
            self.signin_requests["ours"].append(stats_delta(self.server, before))
            self.to_token["ours"].append((t1 - t0) * 1000)
            self.to_list["ours"].append((t2 - t0) * 1000)
        finally:
            if handle is not None:
                handle.stop()
            refresher.stop()
            store.close()
            shutil.rmtree(home, ignore_errors=True)

    async def signin_sdk(self) -> None:
        from mcp.client.session import ClientSession

        gc.collect()
        before = self.server.stats()
        t0 = time.perf_counter()
        fresh = SdkOAuth(self.server.url)
        async with sdk_transport(self.server.url, auth=fresh.provider) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(_common.sdk_negotiate(session), SDK_TIMEOUT)
                await asyncio.wait_for(session.list_tools(), SDK_TIMEOUT)
                t2 = time.perf_counter()
                check_echo(await asyncio.wait_for(session.call_tool("echo", ARGS), SDK_TIMEOUT))
        if fresh.storage.first_tokens_at is None:
            raise RuntimeError("sdk: no tokens were stored")
        self.signin_requests["sdk"].append(stats_delta(self.server, before))
        self.to_token["sdk"].append((fresh.storage.first_tokens_at - t0) * 1000)
        self.to_list["sdk"].append((t2 - t0) * 1000)

    # -- 2. latency --------------------------------------------------------------------------------------

    def latency_benches(self) -> list[Any]:
        url = self.server.url
        return [
            OursAuthBench(self.config, self.home, self.store, self.refresher),
            SdkBench("sdk", lambda: sdk_transport(url, auth=self.sdk.provider)),
            SdkBench("sdk-hdr", lambda: sdk_transport(url, headers={"Authorization": f"Bearer {self.ours_token()}"})),
            RawAuthBench(url, self.ours_token),
        ]

    async def latency(self, bench: Any) -> None:
        fig = self.figs[bench.name]
        gc.collect()
        try:
            await bench.open()
            fig.era = await bench.describe()
            await bench.latency(self.opts.warmup)
            gc.collect()
            c0, s0 = cpu_ns(os.getpid()), cpu_ns(self.server.proc.pid)
            latencies = await bench.latency(self.opts.calls)
            c1, s1 = cpu_ns(os.getpid()), cpu_ns(self.server.proc.pid)
            if None not in (c0, s0, c1, s1):
                fig.client_cpu_ns += c1 - c0
                fig.server_cpu_ns += s1 - s0
                fig.cpu_calls += self.opts.calls
            fig.latencies_ns.extend(latencies)
            fig.round_medians.append(statistics.median(latencies) / 1000)
        finally:
            await bench.close()

    # -- 3. refresh -----------------------------------------------------------------------------------------

    def refresh_ours(self) -> None:
        handle = ServerHandle.start(self.config, self.home, auth=ServerAuth(self.config, self.store, refresh_by(self.refresher)))
        try:
            handle.connect(timeout=SDK_TIMEOUT)
            check_echo(handle.call_tool("echo", ARGS))  # whatever the token was, it is good now
            for _ in range(self.opts.expiries):
                before = self.server.stats()
                self.server.expire()
                t0 = time.perf_counter()
                check_echo(handle.call_tool("echo", ARGS))
                self.refresh_ms["ours"].append((time.perf_counter() - t0) * 1000)
                self.refresh_requests["ours"].append(stats_delta(self.server, before))
            # CONCURRENT callers on the dead token at once
            proxy = self.refresher.proxy()
            asked0 = proxy.token_requests().get(timeout=5)
            before = self.server.stats()
            self.server.expire()
            gate = threading.Barrier(CONCURRENT + 1)
            errors: list[BaseException] = []

            def caller() -> None:
                gate.wait(timeout=10)
                try:
                    check_echo(handle.call_tool("echo", ARGS))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=caller, name=f"bench-caller-{i}") for i in range(CONCURRENT)]
            for thread in threads:
                thread.start()
            gate.wait(timeout=10)
            t0 = time.perf_counter()
            for thread in threads:
                thread.join(SDK_TIMEOUT)
            self.burst_ms["ours"].append((time.perf_counter() - t0) * 1000)
            if errors:
                raise RuntimeError(f"ours: {len(errors)} of {CONCURRENT} concurrent calls failed, first: {errors[0]!r}")
            self.burst_requests["ours"].append(stats_delta(self.server, before))
            self.ours_refresher_requests.append(proxy.token_requests().get(timeout=5) - asked0)
        finally:
            handle.stop()

    async def refresh_sdk(self) -> None:
        from mcp.client.session import ClientSession

        context = self.sdk.provider.context
        async with sdk_transport(self.server.url, auth=self.sdk.provider) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(_common.sdk_negotiate(session), SDK_TIMEOUT)

                async def call() -> None:
                    check_echo(await asyncio.wait_for(session.call_tool("echo", ARGS), SDK_TIMEOUT))

                await call()
                for path in ("sdk", "sdk-known"):
                    for _ in range(self.opts.expiries):
                        before = self.server.stats()
                        self.server.expire()
                        if path == "sdk-known":
                            context.token_expiry_time = time.time() - 1
                        t0 = time.perf_counter()
                        await call()
                        self.refresh_ms[path].append((time.perf_counter() - t0) * 1000)
                        self.refresh_requests[path].append(stats_delta(self.server, before))
                    before = self.server.stats()
                    self.server.expire()
                    if path == "sdk-known":
                        context.token_expiry_time = time.time() - 1
                    t0 = time.perf_counter()
                    await asyncio.gather(*(call() for _ in range(CONCURRENT)))
                    self.burst_ms[path].append((time.perf_counter() - t0) * 1000)
                    self.burst_requests[path].append(stats_delta(self.server, before))

    async def heal(self) -> None:
        """After phase 3 either client's token may be dead (the other expired it last):
        one call each makes both good again (untimed; neither expires the other's)."""
        from mcp.client.session import ClientSession

        handle = ServerHandle.start(self.config, self.home, auth=ServerAuth(self.config, self.store, refresh_by(self.refresher)))
        try:
            handle.connect(timeout=SDK_TIMEOUT)
            check_echo(handle.call_tool("echo", ARGS))
        finally:
            handle.stop()
        async with sdk_transport(self.server.url, auth=self.sdk.provider) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(_common.sdk_negotiate(session), SDK_TIMEOUT)
                check_echo(await asyncio.wait_for(session.call_tool("echo", ARGS), SDK_TIMEOUT))

    # -- the rounds ------------------------------------------------------------------------------------------

    async def rounds(self) -> None:
        await self.setup()
        for r in range(self.opts.rounds):
            progress(f"round {r + 1}/{self.opts.rounds}: sign-in")
            order = ["ours", "sdk"] if r % 2 == 0 else ["sdk", "ours"]
            for _ in range(self.opts.signins):
                for name in order:
                    await (self.signin_ours() if name == "ours" else self.signin_sdk())
            progress(f"round {r + 1}/{self.opts.rounds}: latency")
            benches = self.latency_benches()
            k = r % len(benches)
            for bench in benches[k:] + benches[:k]:
                await self.latency(bench)
            progress(f"round {r + 1}/{self.opts.rounds}: refresh")
            for name in order:
                if name == "ours":
                    self.refresh_ours()
                else:
                    await self.refresh_sdk()
            await self.heal()


# -- report ------------------------------------------------------------------------------------------------


def grants(deltas: list[dict]) -> str:
    """Token requests per event, by grant: 'r1' (refresh) 'c1' (code) 'a1' (authorize); '~' when not constant."""
    if not deltas:
        return "n/a"
    parts = []
    for key, tag in (("refresh_token", "refresh"), ("authorization_code", "code"), ("authorize_requests", "authorize"),
                     ("registrations", "register")):
        values = sorted({d[key] for d in deltas})
        if values != [0]:
            parts.append(f"{tag}={values[0] if len(values) == 1 else f'{values[0]}..{values[-1]}'}")
    return " ".join(parts) or "none"


def report(run: Run, opts: argparse.Namespace, elapsed: float) -> None:
    print()
    print(f"oauth benchmark: tests/servers/oauth_server.py --json-response on 127.0.0.1; python "
          f"{sys.version.split()[0]}, {os.cpu_count()} cpus, albedo_actors {_common.albedo_actors.__version__}, "
          f"mcp {_common.sdk_version()}")
    print(f"rounds={opts.rounds} signins={opts.signins} calls={opts.calls} warmup={opts.warmup} "
          f"expiries={opts.expiries} concurrent={CONCURRENT}")

    print()
    print("1. sign-in, fresh client and token storage each time (probe 401, PRM, AS metadata, register, authorize 302, token)")
    header = f"{'client':<8} {'to token ms':>12} {'min..max':>15} {'to tools/list ms':>17} {'min..max':>15} {'n':>4}  requests each"
    print(header)
    print("-" * len(header))
    for name in ("ours", "sdk"):
        t, l = run.to_token[name], run.to_list[name]
        print(f"{name:<8} {med(t):>12.1f} {min(t):>7.1f}..{max(t):<6.1f} {med(l):>17.1f} {min(l):>7.1f}..{max(l):<6.1f} "
              f"{len(t):>4}  {grants(run.signin_requests[name])}")
    print("   ours to token: SignIn.run() incl. its loopback callback listener (bound, then closed) and two durable")
    print("     SQLite writes (registration, tokens); to tools/list adds ServerHandle start + connect (discover, tools,")
    print("     resources, templates, prompts). sdk to token: from creating the httpx2 client to the provider storing")
    print("     tokens (in memory), its probe being the server/discover POST; to tools/list adds the retried discover")
    print("     and tools/list. Neither includes a browser: the authorization GET is answered 302 at once.")

    print()
    print("2. authorized tools/call echo, sequential, one fresh connection per client and round")
    header = f"{'client':<8} {'era':<18} {'median us':>10} {'p99 us':>10} {'cpu us cli':>10} {'cpu us srv':>10}  spread of round medians"
    print(header)
    print("-" * len(header))
    for name, f in run.figs.items():
        print(f"{name:<8} {f.era:<18} {f.median_us():>10.1f} {f.p99_us():>10.1f} {f.cpu_us(f.client_cpu_ns):>10} "
              f"{f.cpu_us(f.server_cpu_ns):>10}  {min(f.round_medians):.0f}..{max(f.round_medians):.0f}")
    print("   ours: ServerHandle + ServerAuth (token from the store, cached); sdk: ClientSession with the")
    print("   OAuthClientProvider holding tokens as httpx2 auth; sdk-hdr: the same with a static Authorization")
    print("   header instead; raw: requests.Session, modern headers (MCP-Protocol-Version, Mcp-Method, Mcp-Name) +")
    print("   Authorization, as ours sends them. cpu us: per call, this process (all threads) and the server.")
    if run.figs["raw"].era != run.figs["ours"].era:
        print(f"   WARNING: ours negotiated {run.figs['ours'].era!r}; raw speaks {run.figs['raw'].era!r}, not the same era")

    print()
    print("3. refresh after POST /admin/expire (the client still thinks its token good)")
    header = f"{'path':<10} {'to 1 call ms':>12} {'min..max':>15}  {'requests each expiry':<22} {CONCURRENT} callers: {'ms':>6}  requests"
    print(header)
    print("-" * len(header))
    labels = {"ours": "ours", "sdk": "sdk", "sdk-known": "sdk-known"}
    for path, label in labels.items():
        ms = run.refresh_ms[path]
        print(f"{label:<10} {med(ms):>12.1f} {min(ms):>7.1f}..{max(ms):<6.1f}  {grants(run.refresh_requests[path]):<22} "
              f"{'':>10}{med(run.burst_ms[path]):>6.1f}  {grants(run.burst_requests[path])}")
    print("   ours: the call gets 401, the TokenRefresher makes one refresh_token request, the call is posted again.")
    print("   sdk: on a 401 the OAuthClientProvider re-runs discovery and a new authorization (code grant), it does")
    print("     not refresh; its lock is held across every request, so the concurrent callers go one at a time.")
    print("   sdk-known: as sdk, with the provider's token_expiry_time also set in the past: it refreshes before")
    print("     sending (no 401 round trip) and keeps the tokens in memory (ours takes a refresh lease, then compare-and-writes them to SQLite).")
    if run.ours_refresher_requests:
        print(f"   ours TokenRefresher.token_requests() per burst of {CONCURRENT}: "
              f"{sorted(set(run.ours_refresher_requests))}")

    print()
    o = run.figs["ours"]
    lat_sdk = ratio(o.median_us(), run.figs["sdk"].median_us())
    lat_hdr = ratio(o.median_us(), run.figs["sdk-hdr"].median_us())
    lat_raw = ratio(o.median_us(), run.figs["raw"].median_us())
    sign_tok = ratio(med(run.to_token["ours"]), med(run.to_token["sdk"]))
    sign_list = ratio(med(run.to_list["ours"]), med(run.to_list["sdk"]))
    burst = [d["refresh_token"] + d["authorization_code"] for d in run.burst_requests["ours"]]
    print("ratios (lower is better)")
    print(f"  sign-in    to token ours/sdk={sign_tok}   to tools/list ours/sdk={sign_list}")
    print(f"  latency    ours/sdk={lat_sdk}  ours/sdk-hdr={lat_hdr}  ours/raw={lat_raw}   "
          f"p99 ours/sdk={ratio(o.p99_us(), run.figs['sdk'].p99_us())} ours/raw={ratio(o.p99_us(), run.figs['raw'].p99_us())}")
    print(f"  refresh    ours {med(run.refresh_ms['ours']):.1f} ms to a good call; sdk 401 path "
          f"{ratio(med(run.refresh_ms['ours']), med(run.refresh_ms['sdk']))}, sdk-known "
          f"{ratio(med(run.refresh_ms['ours']), med(run.refresh_ms['sdk-known']))}")
    print()
    print(f"RATIOS signin ours/sdk={sign_tok} latency ours/sdk={lat_sdk} ours/sdk-hdr={lat_hdr} ours/raw={lat_raw} "
          f"refresh_ms ours={med(run.refresh_ms['ours']):.1f} burst{CONCURRENT}_token_requests ours="
          f"{max(burst) if burst else 'n/a'}")
    print(f"(latency over {len(o.latencies_ns)} timed calls per client; other figures are medians; run took {elapsed:.1f} s)")


# -- main --------------------------------------------------------------------------------------------------


def _own_servers() -> set[int]:
    """Live oauth_server.py processes started by this process (other runs may have theirs)."""
    mine = set()
    for pid in _common.processes_running(OAUTH_SERVER):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid():
            mine.add(pid)
    return mine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help=f"rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--signins", type=int, default=4, help="sign-ins per client and round (default 4)")
    parser.add_argument("--calls", type=int, default=400, help="timed sequential calls per client and round (default 400)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up calls per client and round (default 50)")
    parser.add_argument("--expiries", type=int, default=3, help="single-caller expiries per client and round (default 3)")
    opts = parser.parse_args(argv)
    if min(opts.rounds, opts.signins, opts.calls, opts.expiries) < 1 or opts.warmup < 0:
        parser.error("--rounds, --signins, --calls and --expiries must be positive")

    before = _own_servers()
    threads_before = set(threading.enumerate())
    started = time.perf_counter()
    server = OAuthServer("--json-response")
    top = tempfile.mkdtemp(prefix="albedo-bench-oauth-")
    run = None
    try:
        server.start()
        _wait_ready(server)
        progress(f"server {server.url} ready")
        run = Run(opts, server, top)
        asyncio.run(run.rounds())
    finally:
        if run is not None:
            run.close()
        server.stop()
        shutil.rmtree(top, ignore_errors=True)
    report(run, opts, time.perf_counter() - started)

    return _common.report_leftovers(before, _own_servers, threads_before)


def _wait_ready(server: OAuthServer, timeout: float = 30.0) -> None:
    """The URL is printed once the port is bound; wait (bounded) until /stats answers."""
    import requests

    deadline = time.monotonic() + timeout
    while True:
        try:
            server.stats()
            return
        except requests.RequestException:
            if server.proc is None or server.proc.poll() is not None:
                raise RuntimeError("the OAuth server exited") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the OAuth server did not answer within {timeout:g} s") from None
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
