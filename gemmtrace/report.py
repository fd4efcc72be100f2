"""One self-contained HTML report per run or comparison of runs, and PNGs of its figures.

The report works offline: plotly.js is inlined once in the page (no CDN), the figures follow, each
from the metrics of gemmtrace.analysis. Figures:
  occupancy      a(t), the SMs with a tile in flight, every run overlaid (static vs dynamic)
  timeline-N     per run: what each (SM, role) does over time, binned (analysis/timeline.py)
  tensor-core    tensor-core time split into busy, head, gaps by cause and tc tail, per run
  tile-durations histogram of the tiles' in-flight durations, runs overlaid
  finish-times   each SM's finish time (end of its last tile), per run
PNGs are screenshots of each figure in headless Chromium (Debian's `chromium`), or kaleido when
it is installed and no Chromium is found. plotly is imported only here, and only when needed.
"""
from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__
from .analysis import compare, compute_metrics
from .analysis.metrics import Metrics, scalar_specs
from .analysis.findings import explain, explain_pair
from .analysis.tables import format_delta, format_value, validation_rows
from .analysis.timeline import role_timeline
from .paths import GemmtraceError

# One color per tag group (and idle), the same in every figure.
GROUP_COLORS = {
    "idle": "#eeeeee",
    "busy": "#2ca02c",
    "mma": "#2ca02c",
    "wait": "#ff7f0e",
    "epilogue": "#9467bd",
    "schedule": "#8c564b",
    "issue": "#1f77b4",
    "setup": "#7f7f7f",
    "head": "#c7c7c7",
    "tc tail": "#17becf",
    "unattributed": "#d62728",
}
RUN_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
OCCUPANCY_MAX_POINTS = 20_000  # beyond this, a(t) is drawn as its time-weighted mean over bins
TIMELINE_BINS = 600
FIGURE_ANCHOR = "fig-"  # each figure's heading is <h2 id="fig-<key>">: findings link to it
STATUS_ID = "gemmtrace-status"  # the page writes here whether every figure rendered (tests read it)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


@dataclass(frozen=True)
class ReportFigure:
    key: str  # file-name friendly: occupancy, timeline-1, tensor-core, ...
    title: str
    caption: str
    figure: object  # plotly.graph_objects.Figure
    width: int
    height: int


@dataclass
class Report:
    path: Path
    figures: list[ReportFigure]
    pngs: list[Path] = field(default_factory=list)


def _plotly():
    try:
        import plotly.graph_objects as go
        import plotly.offline
    except ImportError:
        raise GemmtraceError("reports need plotly, which is not installed (pip install 'gemmtrace[report]').") from None
    return go, plotly.offline


# -- figures ----------------------------------------------------------------------------------
def build_figures(runs: list, metrics: list[Metrics] | None = None,
                  labels: list[str] | None = None) -> list[ReportFigure]:
    """The report's figures for one or more runs (metrics computed when not given)."""
    go, _ = _plotly()
    metrics = metrics or [compute_metrics(r) for r in runs]
    labels = labels or _unique_labels([m.label for m in metrics])
    figs = [_occupancy_figure(go, metrics, labels)]
    for i, (run, m) in enumerate(zip(runs, metrics)):
        figs.append(_timeline_figure(go, run, m, labels[i], i + 1))
    figs += [_tensor_core_figure(go, metrics, labels), _tile_duration_figure(go, metrics, labels),
             _finish_figure(go, metrics, labels)]
    return figs


def _layout(fig, title: str, height: int, **kw) -> None:
    fig.update_layout(title=title, template="plotly_white", height=height, margin=dict(l=70, r=30, t=60, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), **kw)


def _occupancy_figure(go, metrics, labels) -> ReportFigure:
    fig = go.Figure()
    binned = False
    for i, m in enumerate(metrics):
        t, a = _downsample_step(m.occupancy.t_ns - m.t0_ns, m.occupancy.a, m.duration_ns)
        binned |= t.size < m.occupancy.t_ns.size
        t = np.append(t, m.duration_ns) / 1e3
        a = np.append(a, a[-1])
        fig.add_trace(go.Scatter(x=t, y=a, mode="lines", line=dict(shape="hv", color=RUN_COLORS[i % len(RUN_COLORS)]),
                                 name=f"{labels[i]} (mean {100 * m.occupancy.mean:.1f} %)"))
    for p in sorted({m.sm_count for m in metrics}):
        fig.add_hline(y=p, line=dict(dash="dot", color="#888"), annotation_text=f"P = {p} SMs",
                      annotation_position="bottom right")
    _layout(fig, "SM occupancy a(t): SMs with a tile in flight", 420,
            xaxis_title="time from T0 (µs)", yaxis_title="SMs")
    caption = ("a(t) counts the SMs with a tile in flight (from the first to the last span tagged with the tile). "
               "Times are from each run's own T0, so runs line up.")
    if binned:
        caption += " Long curves are drawn as their time-weighted mean over short bins."
    return ReportFigure("occupancy", "SM occupancy", caption, fig, 1100, 420)


def _downsample_step(t: np.ndarray, a: np.ndarray, duration: int) -> tuple[np.ndarray, np.ndarray]:
    """A step function with at most OCCUPANCY_MAX_POINTS steps: the time-weighted mean per bin."""
    if t.size <= OCCUPANCY_MAX_POINTS:
        return t, a
    edges = np.linspace(0, duration, OCCUPANCY_MAX_POINTS + 1)
    seg_end = np.append(t[1:], duration)
    integral = np.concatenate(([0.0], np.cumsum(a * (seg_end - t), dtype=np.float64)))

    def f(x):  # ∫_0^x a
        j = np.searchsorted(t, x, side="right") - 1
        return integral[j] + a[j] * (x - t[j])

    mean = np.diff(f(edges)) / np.diff(edges)
    return edges[:-1], mean


def _timeline_figure(go, run, m: Metrics, label: str, index: int) -> ReportFigure:
    tl = role_timeline(run.spans, bins=TIMELINE_BINS, tag_groups=run.tag_groups)
    n_states = len(tl.states)
    # A discrete colorscale: state k fills [k, k + 1) / n_states.
    scale = []
    for k, name in enumerate(tl.states):
        color = GROUP_COLORS.get(name, RUN_COLORS[k % len(RUN_COLORS)])
        scale += [[k / n_states, color], [(k + 1) / n_states, color]]
    centers = (tl.edges_ns[:-1] + tl.edges_ns[1:]) / 2e3
    rows = tl.row_labels
    fig = go.Figure(
        go.Heatmap(
            z=tl.state, x=centers, y=rows, zmin=-0.5, zmax=n_states - 0.5, colorscale=scale,
            customdata=np.round(100 * tl.busy).astype(np.int8),
            colorbar=dict(title="state", tickvals=list(range(n_states)), ticktext=tl.states, len=0.6),
            hovertemplate="%{y}<br>t = %{x:.2f} µs<br>state %{z}<br>covered %{customdata} %<extra></extra>",
        )
    )
    height = int(min(2400, max(320, 120 + 4 * len(rows))))
    step = max(1, int(np.ceil(14 * len(rows) / (height - 120))))  # tick labels at least 14 px apart
    fig.update_yaxes(type="category", tickmode="array", tickvals=rows[::step], autorange="reversed")
    _layout(fig, f"Per-SM timeline of roles: {label}", height, xaxis_title="time from T0 (µs)")
    caption = (f"Each row is one SM's warp role; each of the {tl.state.shape[1]} time bins shows the tag group that "
               "covered most of it, or idle when the role's spans cover less than half of it. States: "
               + ", ".join(f"{k} = {n}" for k, n in enumerate(tl.states)) + ".")
    return ReportFigure(f"timeline-{index}", f"Timeline: {label}", caption, fig, 1100, height)


def _tensor_core_figure(go, metrics, labels) -> ReportFigure:
    fig = go.Figure()
    groups: list[str] = []
    for m in metrics:
        groups += [g for g, v in m.tensor_core.gap_attribution_ns.items() if v and g not in groups]
    parts = [("busy", lambda m: m.tensor_core.busy_fraction), ("head", lambda m: m.tensor_core.head_fraction)]
    parts += [(f"gaps: {g}", lambda m, g=g: m.tensor_core.gap_attribution.get(g, 0.0)) for g in groups]
    parts += [("tc tail", lambda m: m.tensor_core.tc_tail_fraction)]
    for name, value in parts:
        color = GROUP_COLORS.get(name.removeprefix("gaps: "), None)
        fig.add_trace(go.Bar(y=labels, x=[100 * value(m) for m in metrics], name=name, orientation="h",
                             marker_color=color, hovertemplate="%{y}<br>" + name + ": %{x:.2f} %<extra></extra>"))
    height = 160 + 60 * len(metrics)
    _layout(fig, "Tensor-core time: busy and idle (head, gaps by cause, tc tail)", height, barmode="stack",
            xaxis_title="% of P · D (SMs × traced duration)", legend_traceorder="normal")
    fig.update_yaxes(autorange="reversed")
    caption = ("Busy: the union of each SM's MMA spans. Idle splits into head (before an SM's first MMA; an SM "
               "without MMAs is all head), gaps between MMAs by the consumer span covering them, and the tensor "
               "cores' own tail after the last MMA. The bars sum to 100 %.")
    return ReportFigure("tensor-core", "Tensor-core idle breakdown", caption, fig, 1100, height)


def _tile_duration_figure(go, metrics, labels) -> ReportFigure:
    fig = go.Figure()
    for i, m in enumerate(metrics):
        d = m.tiles["duration_ns"].to_numpy() / 1e3
        fig.add_trace(go.Histogram(x=d, name=f"{labels[i]} ({d.size} tiles)", opacity=0.6, nbinsx=80,
                                   marker_color=RUN_COLORS[i % len(RUN_COLORS)]))
    _layout(fig, "Tile durations (in flight, first to last span of the tile)", 380, barmode="overlay",
            xaxis_title="µs", yaxis_title="tiles")
    caption = "How long each tile was in flight on its SM."
    return ReportFigure("tile-durations", "Tile durations", caption, fig, 1100, 380)


def _finish_figure(go, metrics, labels) -> ReportFigure:
    fig = go.Figure()
    for i, m in enumerate(metrics):
        per_sm = m.load_balance.per_sm
        ran = per_sm["tiles"].to_numpy() > 0
        finish = (per_sm["finish_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[ran] - m.t0_ns) / 1e3
        fig.add_trace(go.Scatter(x=per_sm["sm"].to_numpy()[ran], y=finish, mode="markers", name=labels[i],
                                 customdata=per_sm["tiles"].to_numpy()[ran],
                                 marker=dict(size=6, color=RUN_COLORS[i % len(RUN_COLORS)]),
                                 hovertemplate="SM %{x}<br>finish %{y:.2f} µs<br>%{customdata} tiles<extra></extra>"))
    _layout(fig, "SM finish times (end of each SM's last tile)", 380, xaxis_title="SM", yaxis_title="µs from T0")
    spreads = ", ".join(
        f"{labels[i]}: {format_value(m.load_balance.finish_spread_ns, 'ns')}" for i, m in enumerate(metrics)
    )
    caption = f"Finish-time spread (max − min): {spreads}."
    return ReportFigure("finish-times", "SM finish times", caption, fig, 1100, 380)


def _unique_labels(labels: list[str]) -> list[str]:
    out = []
    for i, label in enumerate(labels):
        out.append(label if labels.count(label) == 1 else f"{i + 1}: {label}")
    return out


# -- the page ---------------------------------------------------------------------------------
_ERROR_CAPTURE = """
window.gemmtraceErrors = [];
window.addEventListener('error', function (e) { window.gemmtraceErrors.push(String(e.message || e)); });
(function () {
  var original = console.error;
  console.error = function () {
    window.gemmtraceErrors.push(Array.prototype.map.call(arguments, String).join(' '));
    return original.apply(console, arguments);
  };
})();
"""

_STATUS_CHECK = """
window.addEventListener('load', function () {
  setTimeout(function () {
    var ids = %s, rendered = [];
    ids.forEach(function (id) {
      var gd = document.getElementById(id);
      var drawn = gd && gd._fullLayout && gd._fullData && gd._fullData.length;
      if (drawn && gd.querySelector('svg.main-svg')) rendered.push(id);
    });
    var status = {figures: ids.length, rendered: rendered, errors: window.gemmtraceErrors};
    document.getElementById('%s').textContent = JSON.stringify(status);
  }, 0);
});
"""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1180px;
       color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 2em; }
p.caption { color: #555; font-size: 0.9em; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.flag-yes { color: #888; } .note { color: #666; font-size: 0.85em; }
div.finding { border-left: 4px solid #d62728; padding: 2px 12px; margin: 10px 0; }
div.finding.trust { border-left-color: #ff7f0e; } div.finding dl { margin: 4px 0; font-size: 0.9em; }
div.finding dt { float: left; width: 4.5em; color: #666; } div.finding dd { margin-left: 5em; }
p.headline { font-size: 1.0em; } p.healthy { border-left: 4px solid #2ca02c; padding: 2px 12px; }
"""


def render_html(runs: list, title: str | None = None) -> tuple[str, list[ReportFigure]]:
    """The report page as a string, and its figures."""
    go, offline = _plotly()
    if not runs:
        raise GemmtraceError("a report needs at least one run.")
    comparison = compare(runs) if len(runs) > 1 else None
    metrics = list(comparison.metrics) if comparison else [compute_metrics(runs[0])]
    labels = _unique_labels([m.label for m in metrics])
    figures = build_figures(runs, metrics, labels)
    title = title or ("gemmtrace report: " + " vs ".join(labels))
    ids = [f"gt-fig-{f.key}" for f in figures]
    pair = explain_pair(runs[0], runs[1], comparison) if len(runs) == 2 else None
    explanations = [pair.a, pair.b] if pair else [explain(r, m) for r, m in zip(runs, metrics)]
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>",
        f"<script>{_ERROR_CAPTURE}</script>",
        f"<script type=\"text/javascript\">{offline.get_plotlyjs()}</script>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class=\"note\">gemmtrace {html.escape(__version__)}; times are ns from each run's T0; "
        "P = the device's SMs, D = T1 − T0 of the trace. Definitions: docs/metrics.md; findings: "
        "docs/findings.md.</p>",
        _findings_html(explanations, labels, pair, {f.key: f.title for f in figures}),
        _runs_table(runs, labels),
        _validation_html(runs, labels),
        _comparison_table(comparison) if comparison else _metrics_table(metrics[0]),
    ]
    config = {"displaylogo": False, "responsive": True}
    for fig, div_id in zip(figures, ids):
        parts.append(f"<h2 id=\"{FIGURE_ANCHOR}{fig.key}\">{html.escape(fig.title)}</h2>")
        parts.append(f"<p class=\"caption\">{html.escape(fig.caption)}</p>")
        parts.append(fig.figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=config,
                                        default_height=f"{fig.height}px"))
    parts.append(f"<pre id=\"{STATUS_ID}\" hidden></pre>")
    parts.append(f"<script>{_STATUS_CHECK % (json.dumps(ids), STATUS_ID)}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts), figures


def _findings_html(explanations, labels, pair, figure_titles: dict[str, str]) -> str:
    """The findings of each run (and, for two, why B differs from A), each linked to its figure."""
    parts = ["<h2 id=\"findings\">Findings</h2>"]
    if pair is not None:
        parts.append(f"<p class=\"headline\"><b>A</b> = {html.escape(labels[0])}; <b>B</b> = {html.escape(labels[1])}.</p>")
        parts += [f"<p class=\"headline\">{html.escape(s)}</p>" for s in (pair.verdict, *pair.sentences)]
    for i, (ex, label) in enumerate(zip(explanations, labels)):
        if len(explanations) > 1:
            parts.append(f"<h3>{html.escape(label)}</h3>")
        parts.append(f"<p class=\"headline{' healthy' if ex.healthy else ''}\">{html.escape(ex.headline)}</p>")
        for rank, f in enumerate(ex.findings, 1):
            key = f"timeline-{i + 1}" if f.figure == "timeline" else f.figure
            link = (f" <a href=\"#{FIGURE_ANCHOR}{key}\">(figure: {html.escape(figure_titles[key])})</a>"
                    if key in figure_titles else "")
            rows = [("what", f.what), ("where", f.where.text), ("why", f.why), ("try", f.remedy)]
            if f.estimate:
                rows.append(("saves", f.estimate["text"]))
            body = "".join(f"<dt>{k}</dt><dd>{html.escape(v)}</dd>" for k, v in rows if v)
            parts.append(f"<div class=\"finding {html.escape(f.kind)}\" id=\"finding-{i + 1}-{rank}\">"
                         f"<b>{rank}. {html.escape(f.title)}</b> — {html.escape(f.size)}{link}<dl>{body}</dl></div>")
    return "\n".join(parts)


def _validation_html(runs, labels) -> str:
    """The trace against Nsight Compute, for the runs validated with gemmtrace validate."""
    parts = []
    for run, label in zip(runs, labels):
        rows = validation_rows(run.meta.get("validation") if isinstance(run.meta, dict) else None)
        if not rows:
            continue
        ok = run.meta["validation"].get("ok")
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        parts.append(f"<p>Validated against Nsight Compute: {html.escape(label)} "
                     f"({'within tolerance' if ok else 'OUTSIDE tolerance'}).</p>"
                     f"<table><tr><th>quantity</th><th>trace</th><th>ncu</th><th>difference</th></tr>{body}</table>")
    return "\n".join(parts)


def _runs_table(runs, labels) -> str:
    rows = []
    for run, label in zip(runs, labels):
        meta = run.meta if isinstance(run.meta, dict) else {}
        device = meta.get("device") if isinstance(meta.get("device"), dict) else {}
        prof = meta.get("profiler") if isinstance(meta.get("profiler"), dict) else {}
        cells = [label, device.get("name", "?"), meta.get("scheduler", "—"), meta.get("order", "—"),
                 f"{len(run.spans):,}", prof.get("dropped", "—"), str(run.path) if run.path else "—"]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("run", "device", "scheduler", "order", "spans", "dropped", "folder"))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _metrics_table(m: Metrics) -> str:
    scalars = m.scalars()
    rows = []
    for spec in scalar_specs(list(m.tensor_core.gap_attribution_ns)):
        value = scalars.get(spec.key)
        if spec.key.startswith("gap_") and not value:
            continue
        cells = (spec.label.strip(), format_value(value, spec.unit))
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table><tr><th>metric</th><th>value</th></tr>{''.join(rows)}</table>"


def _comparison_table(c) -> str:
    head = "<th>metric</th>"
    for i, label in enumerate(c.labels):
        head += f"<th>{i + 1}: {html.escape(label)}</th>"
        if i:
            head += f"<th>Δ {i + 1} vs 1</th><th>within run-to-run spread</th>"
    rows = []
    for r in c.rows:
        if r.key.startswith("gap_") and not any(r.values):
            continue
        cells = [f"<td>{html.escape(r.label)}</td>"]
        for i, v in enumerate(r.values):
            cells.append(f"<td>{html.escape(format_value(v, r.unit))}</td>")
            if i:
                flag = {None: "n/a", True: "yes", False: "no"}[r.within_spread[i]]
                cells.append(f"<td>{html.escape(format_delta(r.deltas[i], r.unit))}</td>")
                cells.append(f"<td class=\"flag-{flag}\">{flag}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def write_report(runs: list, path: str | Path, *, png: bool = False, png_dir: str | Path | None = None,
                 title: str | None = None) -> Report:
    """Write the HTML report of `runs` to `path`; with png, also one PNG per figure (into png_dir,
    default: next to the report, named <report stem>-<figure>.png)."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise GemmtraceError(f"the report is an HTML file; give a path ending in .html, not {path.name!r}.")
    page, figures = render_html(runs, title)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as e:
        raise GemmtraceError(f"cannot write the report to {path} ({e.strerror}).") from None
    report = Report(path, figures)
    if png:
        out = Path(png_dir) if png_dir else path.parent
        report.pngs = [figure_png(f.figure, out / f"{path.stem}-{f.key}.png", f.width, f.height) for f in figures]
    return report


# -- PNG export -------------------------------------------------------------------------------
def find_chromium() -> str | None:
    """A Chromium/Chrome binary: $GEMMTRACE_CHROMIUM, else the first of CHROMIUM_NAMES on PATH."""
    env = os.environ.get("GEMMTRACE_CHROMIUM")
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_args(chromium: str, profile_dir: str) -> list[str]:
    """Headless Chromium with nothing that reaches the network or needs a GPU or sandbox."""
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--hide-scrollbars", "--mute-audio", f"--user-data-dir={profile_dir}"]


def run_chromium(extra: list[str], url: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run headless Chromium on `url` with `extra` flags (a fresh profile each time)."""
    chromium = find_chromium()
    if chromium is None:
        raise GemmtraceError("PNG export needs Chromium, which is not installed (apt-get install chromium, "
                             "or set GEMMTRACE_CHROMIUM to a Chrome binary).")
    with tempfile.TemporaryDirectory(prefix="gemmtrace-chromium-") as profile:
        try:
            return subprocess.run(chromium_args(chromium, profile) + extra + [url], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GemmtraceError(f"Chromium did not finish rendering {url} within {timeout:.0f} s.") from None
        except OSError as e:
            raise GemmtraceError(f"could not start Chromium at {chromium} ({e.strerror}).") from None


def figure_png(fig, path: str | Path, width: int = 1100, height: int = 500) -> Path:
    """Write one figure as a PNG of width x height pixels (headless Chromium, else kaleido)."""
    _, offline = _plotly()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if find_chromium() is None:
        try:
            fig.write_image(str(path), width=width, height=height)
            return path
        except Exception:  # kaleido missing or without a browser: say what to install
            pass
    single = fig.to_html(full_html=False, include_plotlyjs=False, div_id="figure",
                         config={"displayModeBar": False, "staticPlot": True}, default_width=f"{width}px",
                         default_height=f"{height}px")
    page = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{{margin:0;background:#fff}}</style>"
            f"<script>{offline.get_plotlyjs()}</script></head><body>{single}</body></html>")
    with tempfile.TemporaryDirectory(prefix="gemmtrace-png-") as tmp:
        page_path = Path(tmp) / "figure.html"
        page_path.write_text(page, encoding="utf-8")
        shot = Path(tmp) / "figure.png"
        out = run_chromium([f"--screenshot={shot}", f"--window-size={width},{height}", "--virtual-time-budget=10000"],
                           page_path.as_uri())
        if not shot.is_file():
            tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise GemmtraceError(f"Chromium wrote no screenshot of {path.name} ({tail}).")
        shutil.move(str(shot), path)
    return path
