"""Report-to-page latency of the live dashboard, measured in the browser.

A background ``%jax_train`` run on 2 processes reports at RATE reports/s for
SECONDS s; each report carries the engine's wall clock. A MutationObserver in
headless Chromium (JupyterLab) notes when the dashboard's plot image changes
and the last step it shows ("plotted: … steps 1–N"). A step's latency is the
time from its report() on the engine to the first plot that includes it (same
machine, same clock). Prints p50/p95/max and how often the plot was redrawn.

Before the browser, in this process: what one redraw costs the kernel with 2 processes ×
POINTS reports (train and validation loss), i.e. making the inline SVG plot (wall time) and a
whole refresh (text, table and plot; this thread's CPU time, which the dashboard's budget
counts), medians over REDRAWS redraws.

Run: python -m bench.browser_latency [--seconds 20] [--only draw,browser]
(the browser part needs chromium, jupyterlab, playwright). Figures also go to
``bench/results/browser_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time

from bench._results import Results

RATE, SECONDS = 100, 20
POINTS, REDRAWS = 2000, 30
SECTIONS = ("draw", "browser")


def notebook_cells(seconds: int) -> list[str]:
    """The notebook: start, define the paced loop, run it in the background, wait for it."""
    return [
        "%load_ext jaxnb\n%jax_cluster start -n 2",
        f"""%%jax_cluster
import json, time, jaxnb
def paced(config):
    start, sent = time.time(), []
    for i in range({RATE * seconds}):
        while time.time() < start + i / {RATE}:
            time.sleep(0.001)
        sent.append(time.time())
        jaxnb.report({{"loss": 1 / (i + 1)}})
    if jaxnb.get_context().get_world_rank() == 0:
        json.dump(sent, open(config["out"], "w"))""",
        "%jax_train paced --config dict(out=SENT) --background -o run --name paced",
        "run.wait(120)\nprint(len(run.history))",
    ]


OBSERVE = """el => {  // a new plot (the .jaxnb-plot element is replaced): note the time and last step
    window.__frames = [];
    let last = null;
    const note = () => {
        const plot = el.querySelector('.jaxnb-plot');
        if (!plot || plot === last) return;
        last = plot;
        const m = /steps \\d+–(\\d+)/.exec((el.querySelector('.jaxnb-history') || {}).innerText || '');
        window.__frames.push([Date.now() / 1000, m ? +m[1] : 0]);
    };
    new MutationObserver(note).observe(el, {childList: true, subtree: true, characterData: true});
}"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def draw_costs(results: Results) -> None:
    """One redraw's cost in the kernel: the SVG plot (wall) and a whole refresh (thread CPU)."""
    import numpy as np

    from jaxnb._widgets.dashboard import Dashboard
    from jaxnb._widgets.plots import build_panels
    from jaxnb._widgets.svg_plot import MAX_POINTS, render_svg

    dash = Dashboard("bench", 2)
    for p in (0, 1):
        dash.add([{"process": p, "seq": i, "step": i + 1, "time": time.time(), "checkpoint": None,
                   "metrics": {"loss": 1 / (i + 1), "val_loss": 1.2 / (i + 1)}}
                  for i in range(POINTS)])
    steps = np.arange(1.0, POINTS + 1)
    curves = [{"loss": (steps, 1 / steps), "val_loss": (steps, 1.2 / steps)}] * 2
    svg, svg_cpu, refresh = [], [], []
    for i in range(REDRAWS):
        t, cpu = time.perf_counter(), time.thread_time()
        render_svg(build_panels(curves[0], curves[1:], {"step"}, 0.0, None, max_points=MAX_POINTS))
        svg.append(time.perf_counter() - t)
        svg_cpu.append(time.thread_time() - cpu)
        dash.add([{"process": 0, "seq": POINTS + i, "step": POINTS + i + 1, "time": time.time(),
                   "checkpoint": None, "metrics": {"loss": 0.0}}])  # new data: the plot redraws
        cpu = time.thread_time()
        dash.refresh(force=True)
        refresh.append(time.thread_time() - cpu)
    print(f"one redraw, 2 processes x {POINTS} reports (medians of {REDRAWS}): SVG plot made in "
          f"{statistics.median(svg_cpu) * 1e3:.1f} ms of kernel CPU ({statistics.median(svg) * 1e3:.1f}"
          f" ms wall), whole refresh {statistics.median(refresh) * 1e3:.1f} ms of kernel CPU "
          f"(max {max(refresh) * 1e3:.1f} ms)")
    results.add(points_per_process=POINTS, redraws=REDRAWS,
                svg_make_ms={"median": statistics.median(svg) * 1e3, "max": max(svg) * 1e3},
                svg_make_cpu_ms={"median": statistics.median(svg_cpu) * 1e3,
                                 "max": max(svg_cpu) * 1e3},
                refresh_cpu_ms={"median": statistics.median(refresh) * 1e3,
                                "max": max(refresh) * 1e3})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=SECONDS, help="how long the run reports")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"parts to run, comma-separated (default: {','.join(SECTIONS)})")
    args = parser.parse_args()
    results = Results("browser_latency")
    chosen = [part.strip() for part in args.only.split(",") if part.strip()]
    if "draw" in chosen:
        draw_costs(results)
    if "browser" in chosen:
        in_the_browser(args.seconds, results)
    results.write()


def in_the_browser(seconds: int, results: Results) -> None:
    """Report → drawn in the page, in JupyterLab in headless Chromium."""
    from playwright.sync_api import sync_playwright

    from tests.support import lab_server
    from tests.support.browser_page import dashboard, open_notebook, run_and_wait

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jaxnb-bench-"))
    server = lab_server.start(tmp)
    try:
        sent_file = tmp / "sent.json"
        cells = [c.replace("SENT", repr(str(sent_file))) for c in notebook_cells(seconds)]
        path = server.write_notebook("latency.ipynb", cells)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=lab_server.chromium_path(),
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            page = open_notebook(browser.new_context(), server.page_url(path)).page
            run_and_wait(page, 0, timeout_s=150)
            run_and_wait(page, 1)
            out = run_and_wait(page, 2)
            dash = dashboard(out)
            dash.locator(".jaxnb-plot").wait_for(state="attached", timeout=60_000)
            dash.evaluate(OBSERVE)
            run_and_wait(page, 3, timeout_s=seconds + 120)
            frames = page.evaluate("window.__frames")
            browser.close()
        sent = json.loads(sent_file.read_text())
    finally:
        lab_server.stop(server)
    latencies, shown = [], 0
    for at, step in frames:  # steps shown for the first time in this frame
        for s in range(shown + 1, min(step, len(sent)) + 1):
            latencies.append(at - sent[s - 1])
        shown = max(shown, step)
    steady = latencies[RATE:]  # skip the first second (first draw, figure set-up)
    print(f"{len(sent)} reports at {RATE}/s, {len(frames)} plot updates in the page "
          f"({len(frames) / seconds:.2f}/s)")
    print(f"report() -> drawn in the page: p50 {percentile(steady, 0.5) * 1000:.0f} ms, "
          f"p95 {percentile(steady, 0.95) * 1000:.0f} ms, max {max(steady) * 1000:.0f} ms "
          f"(target p95 <= 200 ms)")
    results.add(seconds=seconds, rate=RATE, reports=len(sent), redraws_per_s=len(frames) / seconds,
                latency_ms={"p50": percentile(steady, 0.5) * 1000,
                            "p95": percentile(steady, 0.95) * 1000, "max": max(steady) * 1000})


if __name__ == "__main__":
    main()
