"""Report-to-page latency of the live dashboard, measured in the browser.

A background ``%jax_train`` run on 2 processes reports at RATE reports/s for
SECONDS s; each report carries the engine's wall clock. A MutationObserver in
headless Chromium (JupyterLab) notes when the dashboard's plot image changes
and the last step it shows ("plotted: … steps 1–N"). A step's latency is the
time from its report() on the engine to the first plot that includes it (same
machine, same clock). Prints p50/p95/max and how often the plot was redrawn.

Run: python -m bench.browser_latency   (needs chromium, jupyterlab, playwright)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile

from playwright.sync_api import sync_playwright

from tests.support import lab_server
from tests.support.browser_page import dashboard, open_notebook, run_and_wait

RATE, SECONDS = 100, 20


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=SECONDS, help="how long the run reports")
    seconds = parser.parse_args().seconds
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


if __name__ == "__main__":
    main()
