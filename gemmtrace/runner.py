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
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__, registry
from .build import build, nvcc_version
from .launch import ORDERS, SCHEDULERS, KernelLibrary, Plan
from .paths import ROOT, GemmtraceError
from .trace import BufferLayout, Run, decode

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


@dataclass
class Timing:
    samples_ms: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    def to_dict(self, prefix: str) -> dict:
        s = sorted(self.samples_ms)
        q = np.percentile(s, [25, 75])
        return {
            f"{prefix}_ms": self.median_ms,
            f"{prefix}_ms_min": s[0],
            f"{prefix}_ms_max": s[-1],
            f"{prefix}_ms_p25": float(q[0]),
            f"{prefix}_ms_p75": float(q[1]),
            f"{prefix}_samples": len(s),
        }


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
        self.c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        self.c_ref_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        self.counter = torch.zeros(64, device="cuda", dtype=torch.int32)  # dynamic scheduling: claims, finished CTAs
        self._order = None
        self.stream = torch.cuda.current_stream().cuda_stream
        self.hang = None
        if opts.debug:
            self.hang = torch.zeros(16, dtype=torch.int32).pin_memory()

    def args(self, sched: str, profile: bool, a, b, buf=None, layout: BufferLayout | None = None):
        return self.lib.args(
            self.m, self.n, self.k, sched=sched, order=self.opts.order,
            a=a.data_ptr(), b=b.data_ptr(), c=self.c.data_ptr(),
            prof_data=(buf.data_ptr() if (profile and buf is not None) else None),
            prof_capacity=(layout.capacity if (profile and layout) else 0),
            profile=int(profile), tile_counter=self.counter.data_ptr(),
            hang_report=(self.hang.data_ptr() if self.hang is not None else None),
            stream=self.stream, num_sms=self.props.multi_processor_count, max_ctas=self.opts.max_ctas,
            debug_fault=self.opts.debug_fault, tile_order=self.order_table(),
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
                                           num_sms=self.props.multi_processor_count, max_ctas=self.opts.max_ctas))

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
        lib.plan(lib.args(*opts.shape, sched=sched, order=opts.order))
    say("allocating inputs")
    h = _Harness(torch, opts, lib)
    m, n, k = opts.shape
    flops = 2.0 * m * n * k

    # Profiler buffers, sized from each scheduler's launch plan.
    layouts, bufs, plans = {}, {}, {}
    for sched in opts.schedulers:
        plan = h.plan(sched)
        cap = max(1, int(math.ceil(plan.records_per_region * opts.buffer_scale)))
        layout = BufferLayout(plan.grid_ctas * plan.regions_per_cta, cap)
        plans[sched], layouts[sched] = plan, layout
        bufs[sched] = torch.zeros(layout.total_words, device="cuda", dtype=torch.int32)

    def launch(sched: str, profile: bool, i: int = 0):
        a, b = h.inputs[i % len(h.inputs)]
        try:
            h.launch(h.args(sched, profile, a, b, bufs[sched], layouts[sched]))
        except GemmtraceError:
            raise

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
    if opts.time:
        say(f"timing ({opts.warmup} warm-up + {opts.iters} rounds)")
        variants: list[tuple[str, Callable[[int], None]]] = [
            ("cublas", lambda i: torch.mm(h.inputs[i % len(h.inputs)][0], h.inputs[i % len(h.inputs)][1].t(), out=h.c_ref_out))
        ]
        for sched in opts.schedulers:
            variants.append((f"plain:{sched}", lambda i, s=sched: launch(s, False, i)))
            variants.append((f"profiled:{sched}", lambda i, s=sched: launch(s, True, i)))
        # Each launch takes the next input set (no variant reads operands another just pulled into
        # L2), and each round starts one variant later (none always runs right after another, which
        # matters when the GPU is at its power limit and clocks follow the previous launch).
        launches = 0
        for r in range(opts.warmup):
            for _, fn in variants:
                fn(launches)
                launches += 1
        synced(lambda: None)
        events = {name: [] for name, _ in variants}
        for r in range(opts.iters):
            for v in range(len(variants)):
                name, fn = variants[(r + v) % len(variants)]
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn(launches)
                e1.record()
                launches += 1
                events[name].append((e0, e1))
        synced(lambda: None)
        samples = {name: [e0.elapsed_time(e1) for e0, e1 in evs] for name, evs in events.items()}

    # One traced launch per scheduler, on a cleared buffer, decoded and saved.
    say("recording a traced launch")
    dev, vers = device_meta(torch), versions_meta(torch)
    results = []
    for sched in opts.schedulers:
        bufs[sched].zero_()
        h.counter.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch(sched, True)
        e1.record()
        synced(lambda: None)
        traced_ms = e0.elapsed_time(e1)
        raw = bufs[sched].cpu().numpy()
        decoded = decode(raw, layouts[sched])
        plan = plans[sched]
        timings = {}
        if samples:
            timings.update(Timing(samples[f"plain:{sched}"]).to_dict("kernel"))
            timings.update(Timing(samples[f"profiled:{sched}"]).to_dict("profiled"))
            timings.update(Timing(samples["cublas"]).to_dict("cublas"))
            timings["tflops"] = flops / (timings["kernel_ms"] * 1e-3) / 1e12
            timings["cublas_tflops"] = flops / (timings["cublas_ms"] * 1e-3) / 1e12
            timings["profiled_tflops"] = flops / (timings["profiled_ms"] * 1e-3) / 1e12
            timings["profiler_overhead"] = timings["profiled_ms"] / timings["kernel_ms"] - 1
            timings["pct_of_cublas"] = timings["cublas_ms"] / timings["kernel_ms"]
            timings["method"] = (
                f"CUDA events around single launches, {opts.warmup} warm-up rounds, median of {opts.iters} rounds, "
                f"cuBLAS/plain/profiled interleaved each round in a rotating order, each launch on the next of "
                f"{len(h.inputs)} random-normal input sets"
            )
        meta = {
            "kernel": opts.kernel,
            "arch": spec.arch,
            "idea": spec.idea,
            "shape": {"M": m, "N": n, "K": k},
            "dtype": "bf16 in, fp32 accumulate, bf16 out; C = A @ B^T",
            "scheduler": sched,
            "order": opts.order,
            "debug_build": opts.debug,
            "launch": {
                "grid_ctas": plan.grid_ctas, "block_threads": plan.block_threads, "smem_bytes": plan.smem_bytes,
                "cluster": plan.cluster, "tile": [plan.tile_m, plan.tile_n, plan.tile_k], "stages": plan.stages,
                "tiles": plan.tiles,
            },
            "device": dev,
            "versions": vers,
            "timings": timings,
            "check": {
                "rel_error_plain": errors.get((sched, False)),
                "rel_error_profiled": errors.get((sched, True)),
                "tolerance": BF16_TOLERANCE,
                "reference": "torch fp32 matmul of the same bf16 inputs, TF32 off",
            },
            "profiler": {
                "num_regions": layouts[sched].num_regions,
                "capacity": layouts[sched].capacity,
                "regions_per_cta": plan.regions_per_cta,
                "records": int(len(decoded.spans)),
                "dropped": decoded.dropped,
                "incomplete_regions": decoded.incomplete_regions,
                "t0_globaltimer_ns": decoded.t0_ns,
                "traced_launch_ms": traced_ms,
                "timer": "SM cycles (%clock64) per span, mapped per warp onto %globaltimer ns (init and finish pairs)",
            },
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(),
        }
        run = Run(decoded.spans, meta, decoded.regions)
        results.append(
            RunResult(
                run=run, scheduler=sched,
                rel_error_plain=errors.get((sched, False)), rel_error_profiled=errors.get((sched, True)),
                kernel_ms=timings.get("kernel_ms"), profiled_ms=timings.get("profiled_ms"), cublas_ms=timings.get("cublas_ms"),
                flops=flops, dropped=decoded.dropped,
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
