"""Work three exercises as a new learner would, in JupyterLab in headless Chromium, and keep the screenshots.

    .venv/bin/python tools/try_as_learner.py [OUT]        # OUT defaults to artifacts/try_as_learner/

JupyterLab is started by ``tools/lab.sh`` (what ``make lab`` runs) on a fresh working copy, with the browser test's
helpers (``tests/test_browser.py``). In labs 05, 01 and 02 the cells above an exercise are run (Run > Run All Above
Selected Cell), a screenshot shows the exercise before any try (its hint and worked solution folded), then the
learner's slips and the right step are typed into the exercise cell and run, one screenshot and one feedback text
each: lab 05 ex1 summing every (copy, kernel) pair, lab 01 ex2 in µs for ms, lab 02 ex2 in percent and against the
compute roof alone. The feedback texts are written to ``OUT/feedback.json``. Nothing is asserted: the browser test
does that; this is the try the issue asks to look at (issue 38).
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

RIGHT_05 = ("def hidden_share(copies, kernels):\n    c = intervals.union(copies)\n"
            "    left = intervals.subtract(c, intervals.union(kernels))\n"
            "    return 1 - intervals.length(left) / intervals.length(c)\n")
PAIRS_05 = ("def hidden_share(copies, kernels):\n    total = sum(e - s for s, e in copies)\n"
            "    hid = sum(max(0, min(e, ke) - max(s, ks)) for s, e in copies for ks, ke in kernels)\n"
            "    return hid / total\n")
ROOF_02 = "def fraction_of_roof(flops, dram_bytes, seconds, roof, bandwidth):\n    return {} flops / seconds / {}\n"
TAIL_05 = '\nANSWER_EX1 = hidden_share\ncheck("lab05.ex1", ANSWER_EX1)'
TAIL_02 = '\nANSWER_EX2 = fraction_of_roof\ncheck("lab02.ex2", ANSWER_EX2)'
STEP_01 = 'work = step_gpu_work(tr_b)\nANSWER_EX2 = work["gpu_end_us"].diff().median(){}\ncheck("lab01.ex2", ANSWER_EX2, evidence=tr_b)'
TRIES = {
    "05_overlap_launch": ("lab05.ex1", [("pairs_summed", PAIRS_05 + TAIL_05), ("right", RIGHT_05 + TAIL_05),
                                        ("typed_constant", 'ANSWER_EX1 = 0.931\ncheck("lab05.ex1", ANSWER_EX1)')]),
    "01_nsight_workflow": ("lab01.ex2", [("microseconds", STEP_01.format("")), ("right", STEP_01.format(" / 1e3"))]),
    "02_roofline": ("lab02.ex2", [
        ("percent", ROOF_02.format("100 *", "min(roof, flops / dram_bytes * bandwidth)") + TAIL_02),
        ("compute_roof_only", ROOF_02.format("", "roof") + TAIL_02),
        ("right", ROOF_02.format("", "min(roof, flops / dram_bytes * bandwidth)") + TAIL_02)]),
}


def _exercise_cell(notebook: Path, qid: str) -> tuple[int, int]:
    nb = json.loads(notebook.read_text())
    k = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and c["metadata"].get("infralens", {}).get("question") == qid)
    return k, len(nb["cells"])


def main(out: Path) -> dict:
    import test_browser as tb  # the browser test's server and page helpers
    from conftest import CHROMIUM_ARGS, CHROMIUM_CANDIDATES
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="try-as-learner-"))
    work, home = tmp / "root" / "my-labs", tmp / "home"
    work.mkdir(parents=True)
    home.mkdir()
    chromium = next((c for c in CHROMIUM_CANDIDATES if Path(c).exists()), None) or shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no Chromium here: run `bash tools/browser_deps.sh` as root")
    server = tb.LabServer(work, home)
    said: dict = {}
    try:
        server.wait_ready()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            for lab, (qid, tries) in TRIES.items():
                k, n = _exercise_cell(work / f"{lab}.ipynb", qid)
                page = ctx.new_page()
                tb._open(page, server.url(f"{lab}.ipynb"), n, lab)
                cell = page.locator(f"{tb.PANEL} .jp-Cell").nth(k)
                cell.scroll_into_view_if_needed()
                cell.locator(".jp-InputPrompt").click()
                tb._menu(page, "Run", "Run All Above Selected Cell")
                deadline = time.monotonic() + 300
                page.wait_for_timeout(1000)
                while not tb._kernel_idle(page):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{lab}: the cells above {qid} did not finish in 300 s")
                    page.wait_for_timeout(300)
                cell.scroll_into_view_if_needed()
                page.screenshot(path=str(out / f"{lab}_{qid}_before.png"))
                said[f"{qid} below the exercise, before a try"] = \
                    page.locator(f"{tb.PANEL} .jp-Cell").nth(k + 1).inner_text()[:200]
                for name, source in tries:
                    said[f"{qid} {name}"] = tb._run_cell(page, k, source)
                    cell.scroll_into_view_if_needed()
                    page.screenshot(path=str(out / f"{lab}_{qid}_{name}.png"))
                page.close()
                server.shutdown_kernels()
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    (out / "feedback.json").write_text(json.dumps(said, indent=1, ensure_ascii=False) + "\n")
    return said


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "artifacts" / "try_as_learner"
    for key, text in main(target).items():
        print(f"== {key}\n{text.strip()}")
