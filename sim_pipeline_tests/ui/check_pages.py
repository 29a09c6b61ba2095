"""Look at the Dagster UI's pages in headless Chromium: screenshots plus the text each page must (not) show.

Not part of `make test` (it needs Debian's chromium and the playwright package, and a webserver over a
materialized instance). Run it after `make run`:

    apt-get install -y chromium && .venv/bin/pip install playwright
    DAGSTER_HOME=$PWD/.dagster_home .venv/bin/dagster-webserver -w workspace.yaml -p 3001 &
    .venv/bin/python -m sim_pipeline_tests.ui.check_pages --url http://127.0.0.1:3001 --out .ui

It prints one line per page (OK or what is wrong) and exits 1 when a page misses what it must show.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# What the machine's closed network needs (no background calls) and what a root container needs (no sandbox).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@dataclass(frozen=True)
class Page:
    """One UI page: where it is, what it must show and what it must not."""

    name: str
    path: str
    must: tuple[str, ...] = ()
    must_not: tuple[str, ...] = ()
    click: tuple[str, ...] = field(default=())  # texts to click before reading (a tab, a partition)


PAGES = (
    Page("jobs", "/locations/sim_pipeline.definitions/jobs",
         must=("retail_axes_job", "retail_seed_job", "retail_policy_job", "retail_delta_job"),
         must_not=("__ephemeral_asset_job__",)),
    Page("seed_job", "/locations/sim_pipeline.definitions/jobs/retail_seed_job", must=("Steps 02 and 03",)),
    Page("policy_job", "/locations/sim_pipeline.definitions/jobs/retail_policy_job", must=("Steps 04-08",)),
    Page("automation", "/automation",
         must=("retail_nightly", "retail_seed_ready_sensor", "retail_delta_sensor", "retail_registry_sensor")),
    Page("runs", "/runs", must=("retail_policy_job", "retail_delta_job"), must_not=("__ephemeral_asset_job__",)),
    # (The lineage canvas draws nothing in headless Chromium here, so the graph pages are not checked.)
    Page("catalog", "/assets/retail", must=("Step 01", "Step 02", "Step 03", "Step 04", "Step 05", "Step 06",
                                             "Step 07", "Step 08")),
    Page("grades_checks", "/assets/retail/grades?view=checks", must=("judge_trust", "Blocking")),
    Page("judge_trust_check", "/assets/retail/grades?view=checks&checkDetail=judge_trust",
         must=("judge pass", "judge fail"), must_not=("Show Markdown",)),
    # The inline charts (text, so the UI renders them in place): the delta's forest plot, the pass curves, the
    # search weights; the PNGs beside them stay behind "[Show Markdown]".
    # The Partitions tab with the partition chosen (the Overview tab ignores `partition=`: newest of any version).
    Page("delta_overview", "/assets/retail/delta?view=partitions&partition=agent-v2",
         must=("delta_chart", "95% CI, -1 to +1", "●", "PASS", "p_value", "seeds", "delta_reasons")),
    Page("scores_overview", "/assets/retail/scores", must=("pass_curves_chart", "pass^k", "█", "no-op floor")),
    Page("search_overview", "/assets/retail/search", must=("weights_chart", "structured", "▁")),
    Page("delta_checks", "/assets/retail/delta?view=checks", must=("must_not_regress", "Blocking")),
)


def check(url: str, out: Path) -> list[str]:
    """Visit every page; returns one problem line per missing or unwanted text."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 3000})
        page.goto(url)
        page.wait_for_load_state("networkidle")
        skip = page.get_by_role("button", name="Skip")  # the community sign-up dialog of a new browser profile
        if skip.count():
            skip.first.click()
        for spec in PAGES:
            page.goto(url + spec.path)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)  # the SPA renders after its GraphQL answers arrive
            for text in spec.click:
                page.get_by_text(text).first.click()
                page.wait_for_timeout(1000)
            page.screenshot(path=str(out / f"{spec.name}.png"), full_page=True)
            body = page.inner_text("body")
            missing = [t for t in spec.must if t not in body]
            unwanted = [t for t in spec.must_not if t in body]
            line = f"{spec.name:<18} {spec.path}"
            if missing or unwanted:
                problems.append(f"{line}: missing {missing}, unwanted {unwanted}")
                print(f"FAIL {problems[-1]}")
            else:
                print(f"OK   {line}")
        browser.close()
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command line: --url of a running webserver, --out for the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:3000")
    parser.add_argument("--out", default=".ui", help="directory for one full-page PNG per page")
    args = parser.parse_args(argv)
    return 1 if check(args.url.rstrip("/"), Path(args.out)) else 0


if __name__ == "__main__":
    sys.exit(main())
