"""Command line: ``python -m watermark`` (``awm``) ``{replay,compare,tune,synth,strategies} ...``.

The root command ``awm`` (:mod:`awm.cli`) runs these as its subcommands ``awm replay``, ``awm compare``...

Bad input (a missing column, an unparseable time, an empty file, an invalid parameter) prints one line
``error: ...`` on standard error and exits with status 2; ``tune`` exits with status 1 when no setting
meets the target. Logging, ``--log-format`` and the exit statuses are shared with the other commands
(:mod:`watermark.cli.log`); ``compare`` and ``tune`` show a progress bar on a terminal
(:mod:`watermark.progress`).
"""

from __future__ import annotations

import argparse
import inspect
import json
from collections.abc import Sequence
from typing import Any

from watermark.cli.log import entry_prog, run_main
from watermark.progress import ProgressReporter

EXIT_BAD_INPUT = 2

#: The subcommands and their one-line help (the root command ``awm`` lists them too).
COMMANDS = {
    "replay": "replay a recorded stream through one strategy and report",
    "compare": "replay a grid of strategies and parameters and print a table",
    "tune": "choose the strategy and parameters with the lowest emit latency at a late target",
    "synth": "write a synthetic out-of-order stream (CSV or Parquet)",
    "strategies": "list the strategies with their parameters and defaults",
}


#: Stands in a flag's help for the registered strategies' names, filled in only when help is printed (the
#: registry imports every strategy, numba and river: seconds a command that prints no help never pays).
STRATEGY_NAMES = "{strategy names}"


class StrategyNamesHelp(argparse.HelpFormatter):
    """Help text with :data:`STRATEGY_NAMES` replaced by the names in the strategy registry."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text is not None and STRATEGY_NAMES in text:
            from watermark.strategies.registry import STRATEGIES

            text = text.replace(STRATEGY_NAMES, ", ".join(STRATEGIES))
        return text


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line and exit status 2, like bad input.

    Its help names the registered strategies (:class:`StrategyNamesHelp`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", StrategyNamesHelp)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        """Print ``error: ...`` on one line and exit 2."""
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see {self.prog} --help)\n")


def delimiter_arg(text: str) -> str:
    """Parse a ``--delimiter`` value: one character, or tab, comma, semicolon, pipe."""
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
    value = named.get(text, text)
    if len(value) != 1:
        msg = f"the delimiter must be one character (or tab, comma, semicolon, pipe), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _add_input_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="INPUT", help="CSV or Parquet file of the recorded stream")
    p.add_argument("--event-time", required=True, metavar="COL", help="event-time column (name, or index)")
    p.add_argument("--arrival-time", required=True, metavar="COL", help="arrival-time column")
    p.add_argument("--delimiter", type=delimiter_arg, default=",", help="CSV field separator (default ,)")
    p.add_argument("--no-header", action="store_true", help="the CSV has no header: COL is a 0-based index")
    p.add_argument(
        "--time-format",
        choices=("epoch_ms", "epoch_s", "iso"),
        default="epoch_ms",
        help="how the time columns are written (default epoch_ms)",
    )
    p.add_argument("--partition", metavar="COL", help="source partition column: one generator per partition")
    p.add_argument("--key", metavar="COL", help="aggregation key column: windows per key")
    p.add_argument("--straggler-ms", type=int, default=500, help="straggler window width (default 500)")
    p.add_argument(
        "--idle-timeout-ms",
        type=int,
        default=None,
        help="exclude partitions idle this long (with --partition)",
    )


def _window_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        msg = f"expected comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not values:
        msg = "expected at least one window size"
        raise argparse.ArgumentTypeError(msg)
    return values


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m watermark`` argument parser."""
    parser = OneLineParser(
        prog=entry_prog("python -m watermark"),
        description="Replay recorded streams through watermark strategies: replay one, compare a grid, "
        "tune for a late-data target, write a synthetic stream, list the strategies.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND", title="commands"
    )

    rp = sub.add_parser("replay", help=COMMANDS["replay"])
    _add_input_flags(rp)
    rp.add_argument(
        "--strategy", required=True, metavar="NAME", help=f"the strategy: one of {STRATEGY_NAMES}"
    )
    rp.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="strategy parameter")
    rp.add_argument("--window-ms", type=int, required=True, help="window size (tumbling unless --slide-ms)")
    rp.add_argument("--slide-ms", type=int, default=None, help="window slide (sliding windows)")
    rp.add_argument(
        "--partition-mode",
        choices=("min", "global", "scoped", "keyed"),
        default="min",
        help="with --partition: min over partitions (default), one global generator, partition-scoped "
        "firing of the keys living in each partition, or key-scoped firing (each key by its own watermark)",
    )
    rp.add_argument("--json", action="store_true", help="print one JSON object")

    cp = sub.add_parser("compare", help=COMMANDS["compare"])
    _add_input_flags(cp)
    cp.add_argument("--window-ms", type=_window_list, required=True, help="window sizes, e.g. 100,1000")
    cp.add_argument(
        "--strategies", help=f"comma-separated subset of the grid's strategies ({STRATEGY_NAMES})"
    )
    cp.add_argument("--grid", help='JSON file {"strategy": [{param: value}, ...]} (default: built-in grid)')
    cp.add_argument("--json", action="store_true", help="print the runs as a JSON list")

    tn = sub.add_parser("tune", help=COMMANDS["tune"])
    _add_input_flags(tn)
    tn.add_argument(
        "--target-late-pct", type=float, required=True, help="highest late (dropped) share, in %%"
    )
    tn.add_argument("--window-ms", type=int, required=True, help="window size (tumbling unless --slide-ms)")
    tn.add_argument("--slide-ms", type=int, default=None, help="window slide (sliding windows)")
    tn.add_argument(
        "--strategies", help=f"comma-separated subset of the search space ({STRATEGY_NAMES}; default: all)"
    )
    tn.add_argument(
        "--recent-fraction",
        type=float,
        default=0.5,
        help="tune on the latest part of the history, by arrival (default 0.5; 1 = all of it)",
    )
    tn.add_argument("--json", action="store_true", help="print one JSON object")
    tn.add_argument("--plot", metavar="FILE.png", help="write the trade-off curve with the choice marked")

    sp = sub.add_parser("synth", help=COMMANDS["synth"])
    sp.add_argument("--events", type=int, default=100_000, help="events to generate (default 100000)")
    sp.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sp.add_argument("--partitions", type=int, default=8, help="source partitions (default 8)")
    sp.add_argument("--keys", type=int, default=1_000, help="aggregation keys (default 1000)")
    sp.add_argument("--output", required=True, help="file to write: .parquet or .csv")

    sub.add_parser("strategies", help=COMMANDS["strategies"])
    return parser


def _read(args: argparse.Namespace) -> Any:
    from watermark.streams.recorded import read_stream

    return read_stream(
        args.input,
        event_time=args.event_time,
        arrival_time=args.arrival_time,
        partition=args.partition,
        key=args.key,
        delimiter=args.delimiter,
        header=not args.no_header,
        time_format=args.time_format,
    )


def _options(args: argparse.Namespace, stream: Any) -> dict[str, Any]:
    """The evaluation options that the input flags set, shared by replay and compare."""
    return {
        "partition": stream.partition,
        "key": stream.key,
        "straggler_ms": args.straggler_ms,
        "idle_timeout_ms": args.idle_timeout_ms,
    }


def _cmd_replay(args: argparse.Namespace) -> int:
    from watermark.evaluation.replay import replay
    from watermark.strategies.registry import parse_settings
    from watermark.windowspec import WindowSpec

    window = WindowSpec(args.window_ms, args.slide_ms)
    settings = parse_settings(args.set)
    stream = _read(args)
    result = replay(
        stream.te_ms,
        stream.tp_ms,
        strategy=args.strategy,
        params=settings,
        window=window,
        **_options(args, stream),
        partition_mode=args.partition_mode,
    )
    summary = {"input": str(args.input)} | result.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(_format_summary(summary))
    return 0


def _format_summary(s: dict[str, Any]) -> str:
    def stats(d: dict[str, Any]) -> str:
        if d["mean"] is None:
            return "no window fired before the end of input"
        return f"mean {d['mean']:,.1f}  p50 {d['p50']:,.1f}  p95 {d['p95']:,.1f}  p99 {d['p99']:,.1f}"

    params = ", ".join(f"{k}={v}" for k, v in s["params"].items())
    slide = "" if s["slide_ms"] is None else f", slide {s['slide_ms']:,} ms"
    lines = [
        f"input              {s['input']}",
        f"strategy           {s['strategy']} ({params})",
        f"window             {s['window_ms']:,} ms{slide}",
        f"events             {s['events']:,}",
        f"late (dropped)     {s['late']:,} ({s['dropped_pct']:.2f} %)",
        f"stragglers         {s['stragglers']:,} ({s['stragglers_pct']:.2f} %, band {s['straggler_ms']} ms)",
        f"windows            {s['windows']:,}; fired {s['windows_fired']:,}, "
        f"closed only by end of input {s['windows_flushed']:,}",
        f"trigger delay ms   {stats(s['trigger_delay_ms'])}",
        f"emit latency ms    {stats(s['emit_latency_ms'])}",
        f"watermarks emitted {s['watermarks_emitted']:,}",
    ]
    if s["partitions"] is not None:
        held = s.get("holdback_partition")
        lines.append(
            f"partitions         {s['partitions']}, mode {s.get('partition_mode', 'min')}"
            + ("" if held is None else f" (holding back at the end: {held})")
        )
    return "\n".join(lines)


def _cmd_compare(args: argparse.Namespace) -> int:
    from watermark.evaluation.compare import load_grid, markdown_table, run_grid
    from watermark.windowspec import WindowSpec

    grid = load_grid(args.grid) if args.grid else None
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None
    windows = [WindowSpec(w) for w in args.window_ms]
    stream = _read(args)
    with ProgressReporter("compare", unit="run") as progress:
        rows = run_grid(
            stream.te_ms,
            stream.tp_ms,
            windows=windows,
            grid=grid,
            strategies=strategies,
            **_options(args, stream),
            progress=progress,
        )
    print(json.dumps(rows) if args.json else markdown_table(rows))
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from watermark.tuning.results import plot
    from watermark.tuning.tune import tune
    from watermark.windowspec import WindowSpec

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None
    stream = _read(args)
    with ProgressReporter("tune", unit="run") as progress:
        result = tune(
            stream.te_ms,
            stream.tp_ms,
            target_late_pct=args.target_late_pct,
            window=WindowSpec(args.window_ms, args.slide_ms),
            strategies=strategies,
            **_options(args, stream),
            recent_fraction=args.recent_fraction,
            progress=progress,
        )
    if args.plot:
        plot(result, args.plot)
    out = result.as_dict()
    if args.json:
        print(json.dumps(out))
    else:
        c = result.choice
        settings = " ".join(f"--set {k}={v}" for k, v in c.params.items())
        mode = "" if c.partition_mode is None else f" --partition-mode {c.partition_mode}"
        by_period = " / ".join(f"{x:.2f}" for x in c.late_pct_by_period)
        burst = (
            f"\n            over the target in one burst only ({c.rest_late_pct:.2f} % late outside it): "
            "forgiven as a one-off, such as a device's clock stepping back"
            if c.dropped_pct > args.target_late_pct and c.rest_late_pct is not None
            else ""
        )
        over = out["margin_over"]  # the faster setting the margin turned down (TuneResult.as_dict)
        if over is not None:
            burst += (
                f"\n            with a margin: {over['strategy']} "
                + " ".join(f"--set {k}={v}" for k, v in over["params"].items())
                + ("" if over["partition_mode"] is None else f" --partition-mode {over['partition_mode']}")
                + f" is faster ({over['emit_latency_ms']['mean']:,.1f} ms)"
                + f" at {over['dropped_pct']:.3f} % late, within the target by less than a standard error"
                " of its late count (likely over it on the next period)"
            )
        print(
            f"choice      {c.strategy} {settings}{mode}\n"
            f"late        {c.dropped_pct:.3f} % (target {args.target_late_pct} %)"
            + (f", by sub-period {by_period} %" if by_period else "")
            + f"{burst}\n"
            f"emit latency mean {c.emit_latency_ms['mean']:,.1f} ms, p99 {c.emit_latency_ms['p99']:,.1f} ms\n"
            f"frontier    {len(out['frontier'])} of {out['candidates']} settings"
            + (f"\nplot        {args.plot}" if args.plot else "")
        )
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from watermark.streams.synthetic import describe, generate

    stream = generate(events=args.events, seed=args.seed, partitions=args.partitions, keys=args.keys)
    table = stream.to_arrow()
    out = str(args.output)
    if out.endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq

        pq.write_table(table, out)
    elif out.endswith(".csv"):
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, out)
    else:
        msg = f"--output must end in .parquet or .csv, got {out!r}"
        raise ValueError(msg)
    print(json.dumps({"output": out} | describe(stream)))
    return 0


def _cmd_strategies(args: argparse.Namespace) -> int:
    from watermark.strategies.registry import STRATEGIES

    for name, cls in STRATEGIES.items():
        sig = inspect.signature(cls.__init__)
        params = ", ".join(f"{p}={sig.parameters[p].default!r}" for p in cls.param_types)
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        print(f"{name:11s} {params}\n{'':11s} {summary}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    from watermark.streams.input_error import InputError
    from watermark.tuning.tune import TuneError

    commands = {
        "replay": _cmd_replay,
        "compare": _cmd_compare,
        "tune": _cmd_tune,
        "synth": _cmd_synth,
        "strategies": _cmd_strategies,
    }
    return run_main(
        build_parser(),
        lambda args: commands[args.command](args),
        argv,
        errors={TuneError: 1, (InputError, ValueError): EXIT_BAD_INPUT},
    )
