"""The run harness: build, check against torch, time against cuBLAS, record one profiled launch.

Method (see bench/NOTES.md): seeded random normal inputs in several sets, each launch taking the
next (so no launch finds its operands in L2), output poisoned with NaN before each checked launch, an
fp32 torch reference (TF32 off) compared by relative Frobenius error, CUDA-event timing of single
launches after warm-up, with cuBLAS, the unprofiled build and the profiled build interleaved round by
round in the same process, in an order that rotates every round, and medians over at least 20 rounds.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__, registry
from .build import build, nvcc_version
from .launch import ORDERS, SCHEDULERS, KernelLibrary, Plan
from .paths import ROOT, GemmtraceError
from .capture import Capture, capture
from .timing import time_variants, timing_summary
from .trace import Run

BF16_TOLERANCE = 1e-2  # relative Frobenius error; bf16 output rounding alone gives ~2e-3
MIN_ITERS = 20


@dataclass(frozen=True)
class RunOptions:
    kernel: str
    shape: tuple[int, int, int]
    schedulers: tuple[str, ...] = ("static",)
    order: str = "row"
    iters: int = 30
    warmup: int = 5
    seed: int = 0
    input_sets: int | None = None  # None: enough sets to exceed twice the L2
    buffer_scale: float = 1.0  # scale of the default profiler buffer (tests shrink it)
    debug: bool = False
    check: bool = True
    time: bool = True
    max_ctas: int = 0
    debug_fault: int = 0  # debug builds only: 1 = drop the first load (shows a bounded wait firing)
    variant: int = 0  # kernels with a tile family (v10): 0 = the kernel's rule, i = its i-th tile
    chosen: str | None = None  # how `--kernel best` arrived at this run, recorded with it

    def __post_init__(self):
        registry.get(self.kernel)
        if len(self.shape) != 3 or any(int(x) < 1 for x in self.shape):
            raise GemmtraceError(f"shape must be three positive integers M, N, K; got {self.shape}.")
        for s in self.schedulers:
            if s not in SCHEDULERS:
                raise GemmtraceError(f"unknown scheduler {s!r}; choose from {', '.join(SCHEDULERS)}.")
        spec = registry.get(self.kernel)
        bad = [s for s in self.schedulers if s not in spec.schedulers]
        if bad:
            raise GemmtraceError(
                f"kernel {self.kernel} has no {bad[0]} scheduler (it supports {', '.join(spec.schedulers)})."
            )
        if self.order not in ORDERS:
            raise GemmtraceError(f"unknown tile order {self.order!r}; choose from {', '.join(ORDERS)}.")
        if self.order not in spec.orders:
            raise GemmtraceError(f"kernel {self.kernel} has no {self.order} tile order (it supports {', '.join(spec.orders)}).")
        if self.time and self.iters < MIN_ITERS:
            raise GemmtraceError(f"--iters must be at least {MIN_ITERS} for a median worth quoting; got {self.iters}.")
        if self.debug_fault and not self.debug:
            raise GemmtraceError("a debug fault can only be injected into a debug build (--debug).")
        if self.buffer_scale <= 0:
            raise GemmtraceError(f"buffer scale must be positive; got {self.buffer_scale}.")
        if self.variant and not (1 <= self.variant <= len(spec.tiles)):
            raise GemmtraceError(
                f"kernel {self.kernel} has no tile {self.variant}"
                + (f" (its tiles: {', '.join(f'{i + 1}={t}' for i, t in enumerate(spec.tiles))})." if spec.tiles else " (it has one tile).")
            )


@dataclass
class RunResult:
    run: Run
    scheduler: str
    rel_error_plain: float | None
    rel_error_profiled: float | None
    kernel_ms: float | None
    profiled_ms: float | None
    cublas_ms: float | None
    flops: float
    dropped: int
    folder: Path | None = None
    exports: dict[str, Path] = field(default_factory=dict)

    def tflops(self, ms: float | None) -> float | None:
        return None if not ms else self.flops / (ms * 1e-3) / 1e12

    @property
    def overhead(self) -> float | None:
        if self.kernel_ms and self.profiled_ms:
            return self.profiled_ms / self.kernel_ms - 1.0
        return None

    @property
    def pct_of_cublas(self) -> float | None:
        if self.kernel_ms and self.cublas_ms:
            return self.cublas_ms / self.kernel_ms
        return None


def _torch():
    try:
        import torch
    except ImportError:
        raise GemmtraceError("running kernels needs a CUDA GPU and PyTorch with CUDA, and PyTorch is not installed.") from None
    return torch


def require_gpu(spec: registry.KernelSpec):
    """Return torch once the visible GPU can run `spec`; otherwise one clear sentence."""
    torch = _torch()
    if not torch.cuda.is_available():
        raise GemmtraceError(
            f"no CUDA GPU is visible, and kernel {spec.name} needs an {spec.arch} GPU (compute capability "
            f"{'.'.join(map(str, registry.ARCHS[spec.arch][1]))}) to run."
        )
    cc = torch.cuda.get_device_capability()
    want = registry.ARCHS[spec.arch][1]
    if tuple(cc) != tuple(want):
        name = torch.cuda.get_device_name()
        raise GemmtraceError(
            f"kernel {spec.name} is built for {spec.arch} (compute capability {want[0]}.{want[1]}), "
            f"but the GPU is {name} (compute capability {cc[0]}.{cc[1]})."
        )
    return torch


def _nvidia_smi(query: str) -> list[str] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [x.strip() for x in out.stdout.strip().split(",")]


def device_meta(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    meta = {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }
    q = _nvidia_smi("clocks.sm,clocks.max.sm,clocks.mem,driver_version,power.limit,temperature.gpu")
    if q and len(q) == 6:
        for key, val in zip(("sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz", "driver", "power_limit_w", "temperature_c"), q):
            meta[key] = val
    return meta


def versions_meta(torch) -> dict:
    commit = None
    try:
        if ROOT is None:  # an installed package: no checkout to name
            raise OSError
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip() or None
        changed = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()
        if commit and changed:
            commit += "-dirty"  # measured on uncommitted changes to tracked files
    except OSError:
        pass
    return {
        "gemmtrace": __version__,
        "git_commit": commit,
        "torch": torch.__version__,
        "cuda_runtime_torch": torch.version.cuda,
        "nvcc": nvcc_version(),
        "python": platform.python_version(),
    }


class _Harness:
    """GPU state for one kernel and shape: inputs, outputs, reference, library, profiler buffer."""

    def __init__(self, torch, opts: RunOptions, lib: KernelLibrary):
        self.torch, self.opts, self.lib = torch, opts, lib
        m, n, k = opts.shape
        self.m, self.n, self.k = m, n, k
        self.props = torch.cuda.get_device_properties(0)
        bytes_per_set = 2 * (m * k + n * k)
        l2 = getattr(self.props, "L2_cache_size", 50 << 20) or (50 << 20)
        # Timed launches take the sets in turn (see run_kernel), so between two reads of one set the
        # others stream at least twice the L2 through it: every launch starts with cold operands.
        sets = opts.input_sets or max(2, min(8, 1 + math.ceil(2 * l2 / bytes_per_set)))
        gen = torch.Generator(device="cuda").manual_seed(opts.seed)
        self.inputs = [
            (
                torch.randn(m, k, device="cuda", dtype=torch.float32, generator=gen).to(torch.bfloat16),
                torch.randn(n, k, device="cuda", dtype=torch.float32, generator=gen).to(torch.bfloat16),
            )
            for _ in range(sets)
        ]
        # The input set the latest launch read (see operands); before any, the last one made, so that
        # the set after it is the first made, the longest out of L2.
        self.last_set = len(self.inputs) - 1
        self.c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        self.c_ref_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        self.counter = torch.zeros(64, device="cuda", dtype=torch.int32)  # dynamic scheduling: the claim counter
        # Kernels that pass partial tiles between CTAs (v9) need zeroed scratch memory; they leave it
        # zeroed, so it is allocated once per scheduler's plan and shared by the plain and profiled builds.
        self.workspaces = {}
        self._order = None
        self.stream = torch.cuda.current_stream().cuda_stream
        self.hang = None
        if opts.debug:
            self.hang = torch.zeros(16, dtype=torch.int32).pin_memory()

    def operands(self, i: int):
        """Input set i (modulo their number), remembered as the latest one read."""
        self.last_set = i % len(self.inputs)
        return self.inputs[self.last_set]

    def args(self, sched: str, profile: bool, a, b, prof: Capture | None = None):
        return self.lib.args(
            self.m, self.n, self.k, sched=sched, order=self.opts.order,
            a=a.data_ptr(), b=b.data_ptr(), c=self.c.data_ptr(),
            prof_data=(prof.data_ptr if (profile and prof is not None) else None),
            prof_capacity=(prof.capacity if (profile and prof is not None) else 0),
            profile=int(profile), tile_counter=self.counter.data_ptr(),
            hang_report=(self.hang.data_ptr() if self.hang is not None else None),
            stream=self.stream, num_sms=self.props.multi_processor_count, max_ctas=self.opts.max_ctas,
            debug_fault=self.opts.debug_fault, tile_order=self.order_table(), variant=self.opts.variant,
            workspace=(self.workspaces[sched].data_ptr() if sched in self.workspaces else None),
        )

    def order_table(self) -> int | None:
        """Device address of the tile order (None for row order, which the kernels do by default)."""
        if self.opts.order == "row":
            return None
        if self._order is None:
            from .tile_order import tile_order

            p = self.plan(self.opts.schedulers[0])
            rows = math.ceil(math.ceil(self.m / p.tile_m) / p.cluster)
            cols = math.ceil(self.n / p.tile_n)
            self._order = self.torch.from_numpy(tile_order(rows, cols, self.opts.order)).cuda()
        return self._order.data_ptr()

    def plan(self, sched: str) -> Plan:
        return self.lib.plan(self.lib.args(self.m, self.n, self.k, sched=sched, order=self.opts.order,
                                           num_sms=self.props.multi_processor_count, max_ctas=self.opts.max_ctas,
                                           variant=self.opts.variant))

    def launch(self, args) -> None:
        self.lib.launch(args)

    def check_hang(self) -> None:
        """After a failed debug launch: turn a written HangReport into one sentence."""
        from .tags import role_names

        if self.hang is None:
            return
        h = self.hang.numpy().view(np.uint32)
        if h[0] == 0x48414E47:
            roles = role_names()
            role = roles[h[4]] if h[4] < len(roles) else str(h[4])
            raise GemmtraceError(
                f"kernel {self.opts.kernel} hung: the {role} warp {h[3]} of CTA {h[2]} on SM {h[1]} waited more than the "
                f"debug timeout on barrier {h[5]} (parity {h[8]}) for tile {h[6]}, k-block {h[7]}."
            )


def _rel_error(torch, c, ref) -> tuple[float, int]:
    unwritten = int(torch.isnan(c).sum().item())
    err = torch.linalg.vector_norm(c.float() - ref) / torch.linalg.vector_norm(ref)
    return float(err.item()), unwritten


def run_kernel(opts: RunOptions, progress: Callable[[str], None] | None = None) -> list[RunResult]:
    """Build, check, time and trace `opts.kernel` at `opts.shape`, once per scheduler, in one process."""
    say = progress or (lambda _msg: None)
    spec = registry.get(opts.kernel)
    torch = require_gpu(spec)
    say(f"building {opts.kernel}")
    built = build(opts.kernel, debug=opts.debug)
    lib = KernelLibrary(built.library, opts.kernel)
    # Shape check before any allocation: a shape the kernel cannot do is an error, not a launch.
    for sched in opts.schedulers:
        lib.plan(lib.args(*opts.shape, sched=sched, order=opts.order, variant=opts.variant))
    say("allocating inputs")
    h = _Harness(torch, opts, lib)
    m, n, k = opts.shape
    flops = 2.0 * m * n * k

    # Profiler buffers, sized from each scheduler's launch plan: the capture a user's kernel takes.
    captures, plans = {}, {}
    for sched in opts.schedulers:
        plan = h.plan(sched)
        plans[sched] = plan
        if plan.workspace_bytes:
            h.workspaces[sched] = torch.zeros(plan.workspace_bytes, device="cuda", dtype=torch.uint8)
        captures[sched] = capture(ctas=plan.grid_ctas, regions_per_cta=plan.regions_per_cta,
                                  capacity=max(1, int(math.ceil(plan.records_per_region * opts.buffer_scale)))).allocate()

    def launch(sched: str, profile: bool, i: int = 0):
        a, b = h.operands(i)
        h.launch(h.args(sched, profile, a, b, captures[sched]))

    def synced(fn):
        try:
            fn()
            torch.cuda.synchronize()
        except RuntimeError as e:  # a device fault surfaces here; a debug build may explain it
            h.check_hang()
            raise GemmtraceError(f"kernel {opts.kernel} failed on the GPU: {str(e).splitlines()[0]}") from None

    # Correctness: fresh poisoned output, fp32 reference, for both builds and every scheduler.
    errors: dict[tuple[str, bool], float] = {}
    if opts.check:
        say("checking against torch (fp32 reference)")
        torch.backends.cuda.matmul.allow_tf32 = False
        a, b = h.inputs[0]
        ref = a.float() @ b.float().T
        for sched in opts.schedulers:
            for profile in (False, True):
                h.c.fill_(float("nan"))
                synced(lambda: launch(sched, profile))
                err, unwritten = _rel_error(torch, h.c, ref)
                label = f"{opts.kernel} {'profiled' if profile else 'unprofiled'} ({sched}) at {m}x{n}x{k}"
                if unwritten:
                    raise GemmtraceError(f"{label} left {unwritten} output elements unwritten (NaN poison survived).")
                if not err <= BF16_TOLERANCE:
                    raise GemmtraceError(f"{label} is wrong: relative error {err:.3e} exceeds the bf16 tolerance {BF16_TOLERANCE:g}.")
                errors[(sched, profile)] = err
        del ref

    # Timing: interleave cuBLAS, the plain build and the profiled build round by round.
    samples: dict[str, list[float]] = {}
    timing_method, timing_diagnostics = "", None
    if opts.time:
        say(f"timing ({opts.warmup} warm-up + {opts.iters} rounds)")
        def cublas(i: int) -> None:
            a, b = h.operands(i)
            torch.mm(a, b.t(), out=h.c_ref_out)

        variants: list[tuple[str, Callable[[int], None]]] = [("cublas", cublas)]
        for sched in opts.schedulers:
            variants.append((f"plain:{sched}", lambda i, s=sched: launch(s, False, i)))
            variants.append((f"profiled:{sched}", lambda i, s=sched: launch(s, True, i)))
        # Each launch takes the next input set by its launch index (no variant reads operands another
        # just pulled into L2); gemmtrace.timing holds the stream while a round is enqueued, so the
        # events bracket GPU work, not the host's launch path, and rotates the order every round.
        timed = []
        synced(lambda: timed.append(time_variants(variants, iters=opts.iters, warmup=opts.warmup)))
        samples = timed[0].samples
        timing_diagnostics = timed[0].diagnostics()
        timing_method = (
            f"{timed[0].method} (cuBLAS, plain and profiled builds), each launch on the next of "
            f"{len(h.inputs)} random-normal input sets"
        )

    # One traced launch per scheduler, on a cleared buffer, decoded into a Run as any capture is. It
    # reads the input set after the latest one read, the least recently used of the rotation, so its
    # operands start in DRAM as the timed launches' do. (The set the last timed launch left in L2
    # gave a 4-tile, long-K shape a trace 30 % shorter than the launches it stood for.)
    say("recording a traced launch")
    results = []
    for sched in opts.schedulers:
        prof, plan = captures[sched], plans[sched]
        prof.reset()
        h.counter.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        traced_set = (h.last_set + 1) % len(h.inputs)
        e0.record()
        launch(sched, True, traced_set)
        e1.record()
        synced(lambda: None)
        timings = {}
        if samples:
            timings = timing_summary(samples[f"plain:{sched}"], samples[f"profiled:{sched}"], samples["cublas"], flops,
                                     reference_name="cuBLAS (torch.mm)", method=timing_method)
            timings["diagnostics"] = timing_diagnostics
        run = prof.run(opts.kernel, (m, n, k), timings=timings, warn=False, meta={
            "source": "registry",
            "arch": spec.arch,
            "idea": spec.idea,
            "dtype": "bf16 in, fp32 accumulate, bf16 out; C = A @ B^T",
            "scheduler": sched,
            "order": opts.order,
            "debug_build": opts.debug,
            "launch": {
                "grid_ctas": plan.grid_ctas, "block_threads": plan.block_threads, "smem_bytes": plan.smem_bytes,
                "cluster": plan.cluster, "tile": [plan.tile_m, plan.tile_n, plan.tile_k], "stages": plan.stages,
                "tiles": plan.tiles, "workspace_bytes": plan.workspace_bytes,
                **({"variant": plan.variant, "variant_forced": bool(opts.variant)} if plan.variant else {}),
            },
            **({"chosen": opts.chosen} if opts.chosen else {}),
            "check": {
                "rel_error_plain": errors.get((sched, False)),
                "rel_error_profiled": errors.get((sched, True)),
                "tolerance": BF16_TOLERANCE,
                "reference": "torch fp32 matmul of the same bf16 inputs, TF32 off",
            },
        })
        run.meta["profiler"]["traced_launch_ms"] = e0.elapsed_time(e1)
        run.meta["profiler"]["traced_input_set"] = [traced_set, len(h.inputs)]
        results.append(
            RunResult(
                run=run, scheduler=sched,
                rel_error_plain=errors.get((sched, False)), rel_error_profiled=errors.get((sched, True)),
                kernel_ms=timings.get("kernel_ms"), profiled_ms=timings.get("profiled_ms"),
                cublas_ms=timings.get("reference_ms"), flops=flops, dropped=run.meta["profiler"]["dropped"],
            )
        )
    return results


def default_run_folder(base: Path, opts: RunOptions, sched: str) -> Path:
    m, n, k = opts.shape
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{opts.kernel}-{m}x{n}x{k}-{sched}" + (f"-{opts.order}" if opts.order != "row" else "") + f"-{stamp}"
    folder = base / name
    i = 1
    while folder.exists():
        folder = base / f"{name}-{i}"
        i += 1
    return folder


TRACE_FILES = {"perfetto": "trace.perfetto-trace", "chrome": "trace.json.gz"}


def save_and_export(result: RunResult, folder: Path, formats=("perfetto", "chrome")) -> RunResult:
    result.run.save(folder)
    result.folder = folder
    if formats:
        result.exports = export_run(result.run, folder, formats)
    return result


def export_run(run: Run, folder: Path, formats=("perfetto", "chrome"), output: Path | None = None) -> dict[str, Path]:
    """Write a run's traces, with the occupancy curve a(t) as a counter track and the metrics in
    the trace metadata (both computed once, from the spans)."""
    from .analysis import compute_metrics, metrics_metadata
    from .export import export

    counters, metadata = None, None
    if len(run.spans):
        m = compute_metrics(run)
        counters = {"SMs with a tile in flight": (m.occupancy.t_ns, m.occupancy.a.astype(float))}
        metadata = metrics_metadata(m)
    return {fmt: export(run, output or Path(folder) / TRACE_FILES[fmt], fmt, counters=counters, metadata=metadata)
            for fmt in formats}


def gpu_available() -> bool:
    """True when torch sees a CUDA GPU (used by tests and the CLI to decide what to skip)."""
    if os.environ.get("GEMMTRACE_NO_GPU"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
