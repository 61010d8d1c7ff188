"""megahour's dashboards in a real browser: headless Chromium (Debian's `chromium-headless-shell`, which
`make prereqs` installs on this machine) loads each console from the monitoring server's Prometheus,
over HTTPS as the admin account, runs its JavaScript, and the test asserts every table cell has data
and every graph drew. Screenshots go to MEGAHOUR_SCREENSHOT_DIR (default `.cache/consoles`).

Molecule `cluster` runs it after its training jobs (verify_metrics.yml), from this machine:
``MEGAHOUR_SECRETS_DIR=... pytest --hosts=podman://mh-ctl tests/hosts/test_consoles_browser.py``."""

from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.hosts import probe
from tests.hosts.secrets import secret

CONSOLES = sorted(p.name for p in (REPO / "roles/monitoring/files/consoles").glob("*.html"))
BROWSER = "chromium-headless-shell"
# The consoles' graphs ask Prometheus for their range after the page loads: the browser runs the page's
# timers this long (virtual time: it ends as soon as nothing is left to run).
BUDGET_MS = 15000
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Graphs(html.parser.HTMLParser):
    """Each ``div.mh-graph``'s id -> (whether an ``svg`` is inside it, its text)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, tuple[bool, str]] = {}
        self._open: list[tuple[str, str | None]] = []  # (tag, graph id when the tag opens a graph)

    def _graph(self) -> str | None:
        return next((graph for _, graph in reversed(self._open) if graph), None)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        graph = attributes.get("id") if "mh-graph" in (attributes.get("class") or "").split() else None
        if graph:
            self.found[graph] = (False, "")
        elif tag == "svg" and (inside := self._graph()):
            self.found[inside] = (True, self.found[inside][1])
        if tag not in VOID:
            self._open.append((tag, graph))

    def handle_endtag(self, tag):
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index][0] == tag:
                del self._open[index:]
                break

    def handle_data(self, data):
        if inside := self._graph():
            drew, text = self.found[inside]
            self.found[inside] = (drew, text + data)


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which(BROWSER)
    if binary is None:
        pytest.fail(f"{BROWSER} not found: run `make prereqs` (as root), or apt-get install {BROWSER}")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors",
         "--window-size=1400,1100", f"--virtual-time-budget={BUDGET_MS}", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def base_url(host) -> str:
    """https://admin:<password>@<address>:9090: the browser sends the account on every request of the page,
    its scripts' included."""
    password = urllib.parse.quote(secret("monitoring_admin_password"), safe="")
    return f"https://admin:{password}@{probe.cluster_address(host)}:9090"


@pytest.fixture(scope="module")
def screenshots() -> Path:
    folder = Path(os.environ.get("MEGAHOUR_SCREENSHOT_DIR") or REPO / ".cache" / "consoles")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("console", CONSOLES)
def test_each_console_has_data_in_every_cell_and_every_graph_drew(base_url, screenshots, console):
    proc = chromium("--dump-dom", f"{base_url}/consoles/{console}")
    dom = proc.stdout
    assert proc.returncode == 0 and "</html>" in dom, proc.stderr[-2000:]
    assert "megahour" in dom and "no data" not in dom, dom
    parser = Graphs()
    parser.feed(dom)
    assert parser.found, f"{console} has no graph: {dom[:2000]}"
    for name, (drew, text) in parser.found.items():
        # Rickshaw draws each graph as an SVG; prom_console.js writes an error, or "No timeseries returned",
        # into the graph's node instead
        assert drew and "rror" not in text and "No timeseries" not in text, (console, name, text[:1000])
    shot = chromium(
        f"--screenshot={screenshots / console.replace('.html', '.png')}", f"{base_url}/consoles/{console}"
    )
    assert (
        shot.returncode == 0 and (screenshots / console.replace(".html", ".png")).stat().st_size > 10_000
    ), shot.stderr
