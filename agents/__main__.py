"""``python -m agents``: the node agent's command line.

    python -m agents run --config /etc/cardhour/agent.toml     one agent (flags override the file)
    python -m agents hash-token TOKEN                          the token_sha256 line for the config
    python -m agents fleet --nodes 8 --spool-dir DIR …         several simulated agents, one process

Exit codes: 0 stopped cleanly (SIGTERM/SIGINT), 1 the agent failed while running, 2 bad
configuration or arguments (the message names the key and the rule).
"""

from __future__ import annotations

import argparse
import sys

from agents.agent import Agent, configure_logging, wait_for_signal
from agents.config import BACKENDS, LOG_LEVELS, ConfigError, hash_token, load_config

# run's flags that override a config key: (flag, key, help). --speed and --start go to the table of
# the chosen backend ([sim] or [replay]).
RUN_FLAGS = (
    ("--backend", "backend", f"where measurements come from: {', '.join(BACKENDS)} (default nvml)"),
    ("--listen", "listen", 'HTTP address, "host:port" (default 127.0.0.1:9400)'),
    ("--token-sha256", "token_sha256", "hex SHA-256 of the bearer token (see hash-token); required"),
    ("--interval", "interval_s", "sample interval in seconds, 1-3600 (default 10)"),
    ("--spool", "spool_path", "SQLite spool file (default /var/lib/cardhour-agent/spool.sqlite)"),
    ("--spool-max-mib", "spool_max_mib", "spool size bound in MiB; oldest records dropped first (default 512)"),
    ("--spool-max-age-days", "spool_max_age_days", "spool age bound in days (default 7)"),
    ("--hostname", "hostname", "host name the agent reports (default: this machine's)"),
    ("--log-level", "log_level", f"{', '.join(LOG_LEVELS)} (default info)"),
    ("--gpus", "sim.gpus", "sim: number of GPUs, 1-64 (default 8)"),
    ("--model", "sim.model", "sim: GPU model, H200, H100, A100 or L40S (default H200)"),
    ("--seed", "sim.seed", "sim: workload seed; same seed, same values (default 0)"),
    ("--replay-file", "replay.file", "replay: the samples CSV (ts,node,gpu,util_gpu[,…])"),
    ("--replay-node", "replay.node", "replay: whose rows to play (default: --hostname)"),
)
CLOCK_FLAGS = (
    ("--speed", "speed", "sim/replay: clock speed-up while catching up with real time, >= 1 "
                         "(defaults: sim 1, replay 60)"),
    ("--start", "start", 'sim/replay: clock start: "now", a relative time (write --start=-2h), epoch seconds, '
                         'ISO-8601 with offset, or "first" (replay: the first row; the replay default)'),
)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run one agent", description=(
        "Run one agent: sample the GPUs every interval into the spool and serve /healthz, /v1/inventory, "
        "/v1/samples and /metrics. Values come from --config (TOML, see agents/contrib/agent.example.toml); "
        "each flag below overrides its key."))
    run.add_argument("--config", metavar="FILE", help="TOML configuration file")
    for flag, key, text in RUN_FLAGS:
        run.add_argument(flag, dest=_dest(flag), metavar=key.rpartition(".")[2].upper(), help=f"[{key}] {text}")
    for flag, key, text in CLOCK_FLAGS:
        run.add_argument(flag, dest=_dest(flag), metavar=key.upper(), help=f"[sim.{key} / replay.{key}] {text}")
    run.add_argument("--mig", action=argparse.BooleanOptionalAction, default=None,
                     help="[sim.mig] sim: MIG-partition GPU 0 like the H100 capture (3g+2g+1g+1g)")

    token = commands.add_parser("hash-token", help="print the token_sha256 line for a token",
                                description="Print the config line holding TOKEN's SHA-256 (the agent keeps only "
                                            "the hash). TOKEN '-' reads it from standard input, out of the shell's "
                                            "history.")
    token.add_argument("token", metavar="TOKEN")

    from agents.fleet import add_fleet_arguments

    add_fleet_arguments(commands.add_parser(
        "fleet", help="run several simulated agents in one process",
        description="Run N simulated agents (one HTTP server, sampler and spool each) on consecutive ports; "
                    "see agents/fleet.py for the token file the server's demo loader reads."))
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    overrides = {key: getattr(args, _dest(flag)) for flag, key, _text in RUN_FLAGS if getattr(args, _dest(flag)) is not None}
    if args.mig is not None:
        overrides["sim.mig"] = args.mig
    clock = {key: getattr(args, _dest(flag)) for flag, key, _text in CLOCK_FLAGS if getattr(args, _dest(flag)) is not None}
    flags = {key: flag for flag, key, _text in RUN_FLAGS} | {"sim.mig": "--mig"}
    try:
        config = load_config(args.config, overrides, clock_overrides=clock)
        configure_logging(config.log_level)
        agent = Agent(config)
    except ConfigError as error:
        flag = flags.get(error.key) or next((f for f, k, _t in CLOCK_FLAGS if error.key.rpartition(".")[2] == k), None)
        source = f" [from {flag}]" if flag and _flag_given(args, flag) else ""
        print(f"cardhour-agent: configuration error: {error}{source}", file=sys.stderr)
        return 2
    except Exception as error:  # e.g. NVML cannot initialise: say so in one line; systemd retries
        print(f"cardhour-agent: cannot start: {error!r}", file=sys.stderr)
        return 1
    agent.start()
    wait_for_signal(agent.stop_event)
    agent.stop()
    return 1 if agent.failed else 0


def _flag_given(args: argparse.Namespace, flag: str) -> bool:
    return getattr(args, _dest(flag), None) is not None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "hash-token":
        from_stdin = args.token == "-"  # noqa: S105 ("-" means "read it from stdin", not a password)
        token = sys.stdin.readline() if from_stdin else args.token
        if not token.strip():
            print("cardhour-agent: the token is empty", file=sys.stderr)
            return 2
        print(f'token_sha256 = "{hash_token(token)}"')
        return 0
    if args.command == "fleet":
        from agents.fleet import run_fleet

        return run_fleet(args)
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
