"""``make chaos``: the fault scenarios of issue 17 against real processes, one verdict line each.

    python -m chaos [--only redis,kill-close,…] [--quick]

Starts its own stack (chaos/stack.py: embedded PostgreSQL and Redis under var/chaos, or DATABASE_URL's and
REDIS_URL's servers with a scratch database; a simulated fleet of 3 nodes × 2 GPUs sampling every 5 s, the
web server, one worker, beat; loopback only), runs the scenarios in order, prints
``PASS|FAIL|SKIP  name  evidence`` for each and exits 1 when any failed. Logs stay under var/chaos/logs.
``--quick`` shortens the outages to 20 s for development. Everything started is stopped on every way out.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import traceback
from dataclasses import dataclass

SCENARIOS = ("redis-outage", "postgres-outage", "kill-collect", "kill-rollup", "kill-usage", "kill-close",
             "two-beats", "clock-skew", "webhook-sweep")


@dataclass
class Context:
    """What every scenario gets: the stack, how to browse it, and its time bounds (seconds)."""

    stack: object
    browser: object
    base_url: str
    redis_outage_s: int
    postgres_outage_s: int
    beats_window_s: int
    catch_up_s: int = 120
    task_wait_s: int = 60

    def send(self, task: str, args: list | None = None) -> None:
        from config.celery import app

        app.send_task(task, args=args or [])


def _runner(name: str):
    from chaos import clocks, kills, outages, periodic

    return {
        "redis-outage": outages.redis, "postgres-outage": outages.postgres, "kill-collect": kills.collect,
        "kill-rollup": kills.rollup, "kill-usage": kills.usage, "kill-close": kills.close,
        "two-beats": periodic.two_beats, "clock-skew": clocks.skewed_clocks, "webhook-sweep": periodic.webhook,
    }[name]


def chosen(only: str) -> list[str]:
    """The scenarios ``--only`` names, in their order; a name may be a prefix (``kill`` is all four)."""
    if not only:
        return list(SCENARIOS)
    wanted = [part.strip() for part in only.split(",") if part.strip()]
    unknown = [w for w in wanted if not any(s.startswith(w) for s in SCENARIOS)]
    if unknown:
        raise SystemExit(f"--only: no scenario named {', '.join(unknown)} (there are {', '.join(SCENARIOS)})")
    return [s for s in SCENARIOS if any(s.startswith(w) for w in wanted)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help=f"comma-separated scenarios or prefixes of: {', '.join(SCENARIOS)}")
    parser.add_argument("--quick", action="store_true", help="20 s outages and a shorter two-beat window")
    args = parser.parse_args(argv)
    names = chosen(args.only)

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    from chaos.stack import Stack
    from chaos.verdicts import FAIL, Verdict, exit_code

    stack = Stack()
    verdicts: list[Verdict] = []
    try:
        stack.start(say=lambda text: print(text, flush=True))
        from chaos import seed
        from chaos.observe import collected_up_to, wait_for

        seed.register_nodes(stack.tokens)
        if not wait_for(lambda: collected_up_to({host: 2 for host in stack.tokens}), timeout_s=120):
            raise RuntimeError("the fleet was not collected within 120 s: see var/chaos/logs/worker.log")
        ctx = Context(stack=stack, browser=seed.admin_browser(), base_url=f"http://127.0.0.1:{stack.web_port}",
                      redis_outage_s=20 if args.quick else 120, postgres_outage_s=20 if args.quick else 60,
                      beats_window_s=40 if args.quick else 90)
        print(f"stack up (web on {ctx.base_url}); running {len(names)} scenario(s)\n", flush=True)
        for name in names:
            started = time.monotonic()
            try:
                result = _runner(name)(ctx)
            except Exception as error:  # one scenario's crash is its FAIL; the rest still run
                traceback.print_exc()
                result = Verdict(name, FAIL, f"the scenario raised {error!r}")
            print(result.line() + f"  ({time.monotonic() - started:.0f} s)", flush=True)
            verdicts.append(result)
    finally:
        stack.close()
    return exit_code(verdicts)


if __name__ == "__main__":
    began = time.monotonic()
    code = main()
    print(f"\n(chaos took {time.monotonic() - began:.0f} s)")
    sys.exit(code)
