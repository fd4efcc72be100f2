"""The `gemmtrace` command line. Each command parses, calls one library function, and prints."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import registry
from .paths import GemmtraceError

app = typer.Typer(
    help="Profile GEMM kernels from the inside: build, run, verify and time instrumented kernels, "
    "export Perfetto/Chrome traces, and analyze tensor-core idle time, epilogue overlap and tail waves.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Wide when piped (logs, CI), so tables are not folded into 80 columns.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True)


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4096' -> (4096, 4096, 4096); '8192x8192x4096' or '8192,8192,4096' -> (M, N, K)."""
    parts = [p for p in text.replace(",", "x").lower().split("x") if p]
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise GemmtraceError(f"shape {text!r} is not N or MxNxK with positive integers.") from None
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or any(d < 1 for d in dims):
        raise GemmtraceError(f"shape {text!r} is not N or MxNxK with positive integers.")
    return dims[0], dims[1], dims[2]


def _split(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def _fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


@app.command("includes")
def includes_cmd() -> None:
    """Print the nvcc flag that finds gemmtrace's headers: nvcc $(gemmtrace includes) -c my_kernel.cu"""
    from .paths import INCLUDE_DIR

    print(f"-I{INCLUDE_DIR}")


@app.command("import")
def import_cmd(
    raw: Path = typer.Argument(..., help="The .json a C++ program wrote with gemmtrace::HostCapture::save (or its prefix)."),
    output: Path = typer.Option(..., "--output", "-o", help="The run folder to write."),
    no_export: bool = typer.Option(False, "--no-export", help="Save the run but skip the Perfetto and Chrome exports."),
) -> None:
    """Turn a raw profiler buffer saved by a C++ program into a run folder (then analyze, explain, report, export)."""
    from .importer import import_raw
    from .runner import export_run

    run, warnings = import_raw(raw)
    run.save(output)
    exports = {} if no_export else export_run(run, output)
    console.print(f"imported {len(run.spans)} spans of {run.kernel} into [bold]{output}[/]"
                  + "".join(f"\n  {p}" for p in exports.values()))
    for w in warnings:
        err_console.print(f"[yellow]warning:[/] {w}")


@app.command("list")
def list_kernels() -> None:
    """List the kernels: the idea each adds, tile shape, stages, warps and recording roles."""
    t = Table(title="gemmtrace kernels")
    for col in ("kernel", "arch", "idea", "tile (BMxBNxBK)", "stages", "warps", "cluster", "roles", "schedulers", "orders"):
        t.add_column(col, overflow="fold")
    for k in registry.KERNELS.values():
        tile = k.tile_str if not k.tiles else "one of " + ", ".join(f"{i + 1}: {t}" for i, t in enumerate(k.tiles))
        t.add_row(k.name, k.arch, k.idea, tile, str(k.stages), str(k.warps), str(k.cluster), ", ".join(k.roles),
                  ", ".join(k.schedulers), ", ".join(k.orders))
    console.print(t)
    for k in registry.KERNELS.values():
        if k.rule:
            console.print(f"{k.name}'s rule: {k.rule}.", highlight=False)
    from .choose import RULE as best_rule

    console.print(f"best: {best_rule}", highlight=False)


@app.command("build")
def build_cmd(
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="Kernel to build (see `gemmtrace list`)."),
    all_: bool = typer.Option(False, "--all", help="Build every kernel of the architecture."),
    arch: Optional[str] = typer.Option(None, "--arch", help="sm90a or sm100a (default: the kernel's own; with --all, sm90a)."),
    debug: bool = typer.Option(False, "--debug", help="Debug build: bounded mbarrier waits that report a hang."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the cache has the library."),
) -> None:
    """Compile kernels with nvcc (no GPU needed) and print ptxas's registers, shared memory, stack and spills,
    and warn where ptxas serialized a kernel's wgmma."""
    from .build import build

    if all_ == (kernel is not None):
        raise GemmtraceError("give exactly one of --kernel NAME or --all.")
    specs = registry.for_arch(arch or "sm90a") if all_ else [registry.get(kernel)]
    if not specs:
        console.print(f"no kernels are registered for {arch}.")
        return
    t = Table(title="build")
    for col in ("kernel", "arch", "function", "registers", "smem (static)", "stack", "spill st/ld", "build", "library"):
        t.add_column(col)
    spills, serialized = 0, []
    with console.status("compiling") as status:
        for spec in specs:
            status.update(f"compiling {spec.name} for {arch or spec.arch}")
            r = build(spec.name, arch or spec.arch, debug=debug, force=force)
            for res in r.resources:
                spills += res.spills
                if res.wgmma_serialized:
                    serialized.append(f"{spec.name} {res.function} ({res.wgmma_serialized})")
                t.add_row(spec.name, r.arch, res.function, str(res.registers), str(res.smem_bytes), str(res.stack_bytes),
                          f"{res.spill_store_bytes}/{res.spill_load_bytes}",
                          "cached" if r.cached else f"{r.seconds:.1f} s", str(r.library))
    console.print(t)
    if spills:
        err_console.print(f"[yellow]warning:[/] {spills} bytes of register spills (see the table).")
    for line in serialized:
        err_console.print(f"[yellow]warning:[/] ptxas serialized the wgmma of {escape(line)}.", highlight=False)


@app.command("run")
def run_cmd(
    kernel: str = typer.Option("v1", "--kernel", "-k", help="Kernel to run (see `gemmtrace list`), or best: the rule "
                               "picks kernel, tile, scheduler and order for each shape and says which."),
    shape: List[str] = typer.Option(["4096"], "--shape", "-s", help="N (square) or MxNxK; repeat for several shapes."),
    tile: int = typer.Option(0, "--tile", help="Kernels with a tile family (v10): run tile N of the family "
                             "(numbered from 1 as `gemmtrace list` shows them); 0: the kernel's rule picks."),
    sched: str = typer.Option("static", "--sched", help="Scheduler(s), comma-separated: static,dynamic (persistent kernels)."),
    order: str = typer.Option("row", "--order", help="Tile order: row, snake or hilbert (persistent kernels)."),
    iters: int = typer.Option(30, "--iters", help="Timed rounds (median is reported; at least 20)."),
    warmup: int = typer.Option(5, "--warmup", help="Warm-up rounds before timing."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random normal inputs."),
    out: Path = typer.Option(Path("runs"), "--out", "-o", help="Folder that receives one run folder per launch."),
    no_export: bool = typer.Option(False, "--no-export", help="Save the run but skip the Perfetto and Chrome exports."),
    debug: bool = typer.Option(False, "--debug", help="Debug build: bounded waits report where a kernel would hang."),
    buffer_scale: float = typer.Option(1.0, "--buffer-scale", help="Scale the default profiler buffer (below 1 to test overflow)."),
    json_out: bool = typer.Option(False, "--json", help="Print results as JSON instead of a table."),
    inject_hang: bool = typer.Option(False, "--inject-hang", hidden=True,
                                     help="With --debug: the producer drops its first load, to show a bounded wait firing."),
    validate_runs: bool = typer.Option(False, "--validate", help="Validate each saved run against Nsight Compute "
                                       "(needs ncu; see gemmtrace validate)."),
) -> None:
    """Build, check against torch, time against cuBLAS (same process), and save a trace of one launch;
    print each run's top findings (all of them: gemmtrace explain)."""
    import json

    from .runner import RunOptions, default_run_folder, run_kernel, save_and_export

    shapes = [parse_shape(s) for s in shape]
    if kernel == registry.BEST and (sched != "static" or order != "row" or tile):
        raise GemmtraceError("--kernel best picks the scheduler, tile order and tile itself; drop --sched, --order and --tile.")
    all_results = []
    for shp in shapes:
        common = dict(iters=iters, warmup=warmup, seed=seed, debug=debug, buffer_scale=buffer_scale,
                      debug_fault=int(inject_hang))
        if kernel == registry.BEST:
            from .choose import best_options

            opts, choice = best_options(shp, **common)
            console.print(f"best at {shp[0]}x{shp[1]}x{shp[2]}: [bold]{choice.label()}[/] ({choice.reason})", highlight=False)
        else:
            opts = RunOptions(kernel=kernel, shape=shp, schedulers=_split(sched), order=order, variant=tile, **common)
        with console.status(f"{opts.kernel} {shp[0]}x{shp[1]}x{shp[2]}") as status:
            results = run_kernel(opts, progress=lambda msg: status.update(f"{opts.kernel} {shp[0]}x{shp[1]}x{shp[2]}: {msg}"))
            for r in results:
                status.update(f"saving {r.scheduler} run")
                save_and_export(r, default_run_folder(out, opts, r.scheduler), formats=() if no_export else ("perfetto", "chrome"))
        all_results.extend(results)
    if validate_runs:
        _validate_saved(all_results)
    if json_out:
        print(json.dumps([{"folder": str(r.folder), **r.run.meta["timings"], "check": r.run.meta["check"],
                           "profiler": r.run.meta["profiler"],
                           **({"validation": r.run.meta["validation"]} if "validation" in r.run.meta else {})}
                          for r in all_results], indent=2))
    else:
        console.print(results_table(all_results))
        for r in all_results:
            console.print(f"run saved in [bold]{r.folder}[/]" + "".join(f"\n  {p}" for p in r.exports.values()))
        _print_findings([r.run for r in all_results])
    from .trace import trust_warnings

    for r in all_results:
        prof = r.run.meta["profiler"]
        for w in trust_warnings(r.run.label, prof):
            err_console.print(f"[yellow]warning:[/] {w}")
        if r.dropped:
            scale = buffer_scale * prof["needed_capacity"] / max(prof["capacity"], 1)
            err_console.print(f"  (gemmtrace run: --buffer-scale {scale:.2f} or more)")
    if len(all_results) > 1 and len({r.scheduler for r in all_results}) > 1:
        _print_sched_comparison(all_results)


def _validate_saved(results) -> None:
    """Validate each saved run against ncu; without ncu, one warning and no validation."""
    from .validate import find_ncu, validate

    try:
        find_ncu()
    except GemmtraceError as e:
        err_console.print(f"[yellow]warning:[/] runs not validated: {e}", highlight=False)
        return
    for r in results:
        try:
            with console.status(f"validating {r.run.label} under ncu"):
                validate(r.run)
        except GemmtraceError as e:
            err_console.print(f"[yellow]warning:[/] {r.run.label} not validated: {e}", highlight=False)


def _print_findings(runs) -> None:
    """Each run's top findings and its validation, when it has one; a run the analysis cannot read is a warning."""
    from .analysis.findings import explain
    from .analysis.tables import validation_table

    for run in runs:
        try:
            console.print(explain(run).short(), markup=False, highlight=False)
        except GemmtraceError as e:
            err_console.print(f"[yellow]warning:[/] no findings for {run.label}: {e}", highlight=False)
        validated = validation_table(run.meta.get("validation"), run.label)
        if validated is not None:
            console.print(validated)


def results_table(results) -> Table:
    t = Table(title="gemmtrace run")
    for col in ("kernel", "shape", "sched", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "% of cuBLAS", "profiled TFLOP/s",
                "profiler overhead", "rel. error", "spans", "dropped"):
        t.add_column(col, justify="right")
    for r in results:
        s = r.run.meta["shape"]
        t.add_row(r.run.kernel, f"{s['M']}x{s['N']}x{s['K']}", r.scheduler, _fmt(r.kernel_ms, ".3f"),
                  _fmt(r.tflops(r.kernel_ms), ".1f"), _fmt(r.tflops(r.cublas_ms), ".1f"),
                  _fmt(None if r.pct_of_cublas is None else 100 * r.pct_of_cublas, ".1f"),
                  _fmt(r.tflops(r.profiled_ms), ".1f"),
                  _fmt(None if r.overhead is None else 100 * r.overhead, "+.2f") + ("%" if r.overhead is not None else ""),
                  _fmt(r.rel_error_plain, ".2e"), str(len(r.run.spans)), str(r.dropped))
    return t


def _print_sched_comparison(results) -> None:
    from .analysis import compare
    from .analysis.tables import compare_table

    try:  # the runs are saved already: a comparison that cannot be made is a warning, not a failure
        console.print(compare_table(compare([r.run for r in results])))
    except GemmtraceError as e:
        err_console.print(f"[yellow]warning:[/] no scheduler comparison: {e}")


@app.command("bench")
def bench_cmd(
    kernels: str = typer.Option("v1", "--kernels", "-k", help="Comma-separated kernels (see `gemmtrace list`); best: "
                                "the rule's choice for each shape."),
    shapes: Optional[List[str]] = typer.Option(None, "--shape", "-s", help="Shapes (N or MxNxK); given, they replace the suite."),
    suite: str = typer.Option("default", "--suite", help="Named shape list: default or shapes (see gemmtrace/bench.py SUITES)."),
    sched: str = typer.Option("static", "--sched", help="Scheduler(s), comma-separated."),
    order: str = typer.Option("row", "--order", help="Tile order (persistent kernels)."),
    iters: int = typer.Option(30, "--iters", help="Timed rounds per shape (median reported)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="JSON file (default: bench/results/<date>-<device>-<kernels>.json)."),
) -> None:
    """Time kernels over a shape list against cuBLAS (same process); print and save TFLOP/s and % of cuBLAS."""
    from rich.progress import Progress

    from .bench import run_bench, save_bench, suite_shapes

    kernel_list = list(_split(kernels))
    for k in kernel_list:
        if k != registry.BEST:
            registry.get(k)
    shape_list = [parse_shape(s) for s in shapes] if shapes else suite_shapes(suite)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("bench", total=len(kernel_list) * len(shape_list))
        # One line per finished or skipped shape (kept in logs); the bar names the shape running now.
        rows, header = run_bench(kernel_list, shape_list, _split(sched), order, iters,
                                 progress=lambda line: progress.console.print(line, markup=False, highlight=False),
                                 status=lambda msg, done, total: progress.update(task, description=msg, completed=done),
                                 suite=None if shapes else suite)
    path = save_bench(rows, header, output)
    t = Table(title=f"gemmtrace bench on {header['device']['name']}")
    for col in ("kernel", "shape", "sched", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "% of cuBLAS", "profiler overhead", "rel. error"):
        t.add_column(col, justify="right")
    for row in rows:
        d = row.to_dict()
        t.add_row(row.kernel, "x".join(map(str, row.shape)), row.scheduler, f"{d['kernel_ms']:.3f}", f"{d['tflops']:.1f}",
                  f"{d['cublas_tflops']:.1f}", f"{100 * d['pct_of_cublas']:.1f}", f"{100 * d['profiler_overhead']:+.2f}%",
                  f"{d['rel_error']:.2e}")
    console.print(t)
    if header["skipped"]:
        console.print(f"skipped {len(header['skipped'])} kernel and shape pairs the kernels cannot run (listed above and in the JSON)")
    console.print(f"saved {path}")


@app.command("export")
def export_cmd(
    run: Path = typer.Argument(..., help="A saved run folder."),
    fmt: str = typer.Option("perfetto", "--format", "-f", help="perfetto (.perfetto-trace) or chrome (.json.gz)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output file (default: inside the run folder)."),
) -> None:
    """Export a saved run as a Perfetto or Chrome trace (both open in ui.perfetto.dev)."""
    import time

    from .runner import TRACE_FILES, export_run
    from .trace import load

    if fmt not in TRACE_FILES:
        raise GemmtraceError(f"unknown format {fmt!r}; choose perfetto or chrome.")
    r = load(run)
    t0 = time.perf_counter()
    path = export_run(r, run, (fmt,), output)[fmt]
    dt = time.perf_counter() - t0
    console.print(f"wrote {path} ({len(r.spans)} spans in {dt:.2f} s)")


# -- analysis: analyze, compare, report, simulate ----------------------------------------------
_RUNS_HELP = "Saved run folders (with --sample: names of bundled samples, default all of them)."
_SAMPLE_HELP = "Use the runs bundled with gemmtrace (recorded on an H100) instead of run folders."


def _load_runs(runs: Optional[List[str]], sample: bool, at_least: int = 1) -> list:
    """Run folders, or bundled samples with --sample; one sentence when there are too few."""
    from .samples import load_samples
    from .trace import load

    loaded = load_samples(list(runs or [])) if sample else [load(Path(r)) for r in runs or []]
    if len(loaded) < at_least:
        need = "a run" if at_least == 1 else f"at least {at_least} runs"
        where = f"only {len(loaded)} bundled sample(s) were given or found" if sample else f"got {len(loaded)} run folder(s)"
        raise GemmtraceError(f"this command needs {need} ({where}; give run folders, or --sample for the bundled runs).")
    return loaded


def _print_json(data) -> None:
    import json

    print(json.dumps(data, indent=2, allow_nan=False))


@app.command("analyze")
def analyze_cmd(
    runs: Optional[List[str]] = typer.Argument(None, help=_RUNS_HELP, show_default=False),
    sample: bool = typer.Option(False, "--sample", help=_SAMPLE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the metrics as JSON instead of tables."),
    tables: bool = typer.Option(False, "--tables", help="With --json: include a(t), the per-SM and per-tile tables."),
    per_sm: bool = typer.Option(False, "--per-sm", help="Also print the per-SM table (busy time, tiles, finish)."),
) -> None:
    """Tensor-core idle time, epilogue overlap, occupancy, tail wave and load balance of saved runs,
    each run's top findings first (all of them: gemmtrace explain)."""
    from .analysis import compute_metrics
    from .analysis.findings import explain
    from .analysis.tables import metrics_table, per_sm_table, validation_table

    loaded = _load_runs(runs, sample)
    metrics = [compute_metrics(r) for r in loaded]
    if json_out:
        out = [m.to_dict(tables=tables) for m in metrics]
        _print_json(out[0] if len(out) == 1 else out)
        return
    for run, m in zip(loaded, metrics):
        console.print(explain(run, m).short(), markup=False, highlight=False)
        console.print(metrics_table(m))
        validated = validation_table(run.meta.get("validation"), m.label)
        if validated is not None:
            console.print(validated)
        if per_sm:
            console.print(per_sm_table(m))


@app.command("compare")
def compare_cmd(
    runs: Optional[List[str]] = typer.Argument(None, help=_RUNS_HELP, show_default=False),
    sample: bool = typer.Option(False, "--sample", help=_SAMPLE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of a table."),
) -> None:
    """Runs side by side (e.g. static vs dynamic): kernel time, TFLOP/s and every metric, with deltas
    to the first run, flagged when within the run-to-run spread recorded in the runs."""
    from .analysis import compare
    from .analysis.tables import compare_table

    comparison = compare(_load_runs(runs, sample, at_least=2))
    if json_out:
        _print_json(comparison.to_dict())
    else:
        console.print(compare_table(comparison))


@app.command("report")
def report_cmd(
    runs: Optional[List[str]] = typer.Argument(None, help=_RUNS_HELP, show_default=False),
    output: Path = typer.Option(Path("gemmtrace-report.html"), "--output", "-o", help="The HTML file to write."),
    sample: bool = typer.Option(False, "--sample", help=_SAMPLE_HELP),
    png: bool = typer.Option(False, "--png", help="Also write each figure as a PNG (needs Chromium)."),
    png_dir: Optional[Path] = typer.Option(None, "--png-dir", help="Folder for the PNGs (default: next to the report)."),
    title: Optional[str] = typer.Option(None, "--title", help="The report's title."),
) -> None:
    """One self-contained HTML report (works offline) of one run or a comparison of runs."""
    from .report import write_report

    report = write_report(_load_runs(runs, sample), output, png=png, png_dir=png_dir, title=title)
    console.print(f"wrote {report.path} ({len(report.figures)} figures)")
    for p in report.pngs:
        console.print(f"  {p}")


@app.command("simulate")
def simulate_cmd(
    runs: Optional[List[str]] = typer.Argument(None, help=_RUNS_HELP, show_default=False),
    sms: Optional[int] = typer.Option(None, "--sms", help="SMs to replay on (default: the run's device)."),
    sched: str = typer.Option("static,dynamic", "--sched", help="Scheduler(s) to replay, comma-separated."),
    ctas: Optional[int] = typer.Option(None, "--ctas", help="CTAs of a persistent kernel (default: its grid rule on --sms)."),
    claim_ns: Optional[int] = typer.Option(None, "--claim-ns", help="What a dynamic tile claim costs (default: as measured; 0 when none)."),
    sample: bool = typer.Option(False, "--sample", help=_SAMPLE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the prediction as JSON instead of a table."),
) -> None:
    """What-if scheduling (a model): replay a run's measured tile times on --sms SMs under static and
    dynamic scheduling; predict makespan, occupancy and tail."""
    from .analysis.simulate import simulate
    from .analysis.tables import simulation_table

    sims = [simulate(r, sms=sms, schedulers=_split(sched), workers=ctas, claim_ns=claim_ns)
            for r in _load_runs(runs, sample)]
    if json_out:
        out = [s.to_dict() for s in sims]
        _print_json(out[0] if len(out) == 1 else out)
        return
    for s in sims:
        console.print(simulation_table(s))


@app.command("explain")
def explain_cmd(
    runs: Optional[List[str]] = typer.Argument(None, help="One run folder, or two (A B) to explain why B is faster "
                                               "or slower than A (with --sample: bundled sample names).",
                                               show_default=False),
    sample: bool = typer.Option(False, "--sample", help=_SAMPLE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON instead of words."),
) -> None:
    """What holds a run back, in words: ranked findings with where, why, what to try and the saving the
    what-if model estimates (docs/findings.md). Two runs: why B is faster or slower than A."""
    from .analysis.findings import explain_runs
    from .samples import scheduler_pair

    if sample and not runs:  # the bundled static/dynamic pair: why the dynamic scheduler wins there
        runs = scheduler_pair()
    explanation = explain_runs(_load_runs(runs, sample))
    if json_out:
        _print_json(explanation.to_dict())
    else:
        console.print(explanation.text(), markup=False, highlight=False)


@app.command("validate")
def validate_cmd(
    run: Path = typer.Argument(..., help="A saved run folder of a kernel gemmtrace builds."),
    ncu: Optional[Path] = typer.Option(None, "--ncu", help="The ncu binary (default: $GEMMTRACE_NCU, PATH, /usr/local/cuda/bin)."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Launch the run's kernel once more under Nsight Compute and compare the trace's duration and
    tensor-core busy with ncu's counters; the result is stored in the run's meta.json. Exits 3 when a
    figure is outside its tolerance (docs/findings.md, Validation)."""
    from .analysis.tables import validation_table
    from .validate import validate

    with console.status("profiling one launch under ncu"):
        result = validate(run, ncu)
    if json_out:
        _print_json(result)
    else:
        console.print(validation_table(result, str(run)))
        console.print(f"stored in {result.get('stored_in', run / 'meta.json')}", markup=False, highlight=False)
    if not result["ok"]:
        raise typer.Exit(3)


@app.command("_launch-once", hidden=True)
def launch_once_cmd(
    kernel: str = typer.Option(..., "--kernel", "-k"),
    shape: str = typer.Option(..., "--shape", "-s"),
    sched: str = typer.Option("static", "--sched"),
    order: str = typer.Option("row", "--order"),
    debug: bool = typer.Option(False, "--debug"),
) -> None:
    """One profiled launch of a kernel, nothing checked, timed or saved: what `validate` runs under ncu."""
    from .validate import launch_once

    launch_once(kernel, parse_shape(shape), sched, order, debug)


def main() -> None:
    """Console entry point: user errors print one sentence and exit 1, never a traceback."""
    try:
        app()
    except GemmtraceError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)  # the message as written: "[report]" is not markup
        sys.exit(1)


if __name__ == "__main__":
    main()
