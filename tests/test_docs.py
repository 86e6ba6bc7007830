"""The documentation site builds with warnings as errors, and its mathematics renders in a browser.

The formulation pages show their modules' docstrings, whose TeX the build turns into MathML
(docs/hooks.py). A headless Chromium opens the built page inside a harness page, which reports
every `<math>` element's layout and the text a reader sees outside them: the formulas must be
laid out as math, and no TeX may be left in the text. Needs the `docs` extra and a Chromium
(`apt-get install chromium`); marked `docs`, which the default run leaves out:
`python -m pytest -m docs`.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[1]
# The pages whose module docstrings hold their model in TeX, and the constraint tags each displays.
MATH_PAGES = {
    "formulations/goodput.html": ["(one)", "(level)", "(slots)", "(minspd)"],
    "formulations/freezing.html": ["(one)", "(budget)"],
    "formulations/gavel.html": ["(fair)", "(floor)", "(time)", "(cap)", "(runs)"],
    "formulations/options.html": [],
    "formulations/joint.html": ["(one)", "(demand)", "(level)", "(slots)", "(node)", "(stay)", "(comp)", "(whole)", "(rack)",
                                 "(minspd)"],
    "formulations/placement.html": ["(place)", "(cap)", "(node)", "(tier)", "(order)", "(spread)", "(onenode)", "(lost)",
                                    "(stay)", "(typed)", "(onetype)", "(pin)", "(cover)", "(alone)", "(twins)", "(scarce)",
                                    "(scarce_count)"],
}
# What TeX left unrendered looks like: a dollar delimiter, \( \[ or a control word such as \frac.
RAW_TEX = re.compile(r"\$|\\[(\[]|\\[A-Za-z]+")

# Reports, once the page has loaded, each formula's computed display and size and the article's
# text without its formulas. A browser that lays MathML out gives <math> the display `math`
# (inline) or `block math`; one that does not leaves it `inline`.
HARNESS = """<!doctype html>
<html><body>
<pre id="report"></pre>
<iframe id="page" src="{page}" width="1280" height="900"></iframe>
<script>
document.getElementById("page").addEventListener("load", () => {{
  const doc = document.getElementById("page").contentDocument;
  const article = doc.querySelector("article");
  const maths = [...article.querySelectorAll("math")].map((m) => {{
    const box = m.getBoundingClientRect();
    return {{display: getComputedStyle(m).display, width: box.width, height: box.height,
             text: m.textContent}};
  }});
  const prose = article.cloneNode(true);
  prose.querySelectorAll("math, script, style").forEach((e) => e.remove());
  document.getElementById("report").textContent = JSON.stringify({{maths, text: prose.textContent}});
}});
</script>
</body></html>
"""


def _chromium() -> str:
    """The Chromium binary, or a skip naming what to install."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.skip("no Chromium binary on PATH (apt-get install chromium)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built with `mkdocs build --strict` into a temporary folder."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    return out


def _rendered(site: Path, page: str, tmp_path: Path) -> dict:
    """What a headless Chromium shows of one built page: its formulas' layout and its text."""
    browser = _chromium()
    harness = site / f"harness-{Path(page).stem}.html"
    harness.write_text(HARNESS.format(page=page))
    run = subprocess.run(
        [browser, "--headless", "--disable-gpu", "--no-sandbox", "--allow-file-access-from-files",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom", harness.as_uri()],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = re.search(r'<pre id="report">(.*?)</pre>', run.stdout, re.S)
    assert report and report[1], f"the harness reported nothing: {run.stdout[-2000:]}"
    return json.loads(html.unescape(report[1]))


def test_site_builds_strict(site: Path) -> None:
    """Every page is built, the generated service API page and its OpenAPI document included."""
    for page in ("index.html", "getting-started.html", "service-api.html", *MATH_PAGES):
        assert (site / page).is_file(), page
    openapi = json.loads((site / "openapi.json").read_text())
    assert "/v1/solve" in openapi["paths"]
    assert "POST /v1/solve" in (site / "service-api.html").read_text()


@pytest.mark.parametrize("page", sorted(MATH_PAGES))
def test_math_renders(site: Path, page: str, tmp_path: Path) -> None:
    """The page's formulas are laid out as MathML, its constraint tags among them, and no TeX is left."""
    shown = _rendered(site, page, tmp_path)
    maths = shown["maths"]
    assert len(maths) >= 10, f"{page}: only {len(maths)} formulas"
    assert {m["display"] for m in maths} <= {"math", "block math"}, f"{page}: formulas not laid out as math"
    assert all(m["width"] > 0 and m["height"] > 0 for m in maths), f"{page}: a formula of no size"
    displayed = " ".join(m["text"] for m in maths if m["display"] == "block math")
    for tag in MATH_PAGES[page]:
        assert tag in displayed, f"{page}: constraint {tag} not among the displayed formulas"
    left = sorted(set(RAW_TEX.findall(shown["text"] + " ".join(m["text"] for m in maths))))
    assert not left, f"{page}: raw TeX left on the page: {left}"
