"""The labs as a learner meets them: JupyterLab in headless Chromium, every cell run.

One ``jupyter lab`` server (from this environment, on a temp copy of labs/ so running cells
never touches the committed notebooks) and one Debian Chromium driven by Playwright. For
each lab, plus a fixture notebook of known content: open it, clear outputs, Run All Cells,
wait for every cell to finish, then check that no cell raised, that the figures and
"Evidence:" provenance lines the committed notebook shows are rendered again, and that a
self-check widget answers its 'Check' button. Screenshots go to artifacts/screenshots/.
Skipped, with the reason, only where Chromium is missing or cannot start.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from conftest import CHROMIUM_ARGS, FIXTURE_QUESTION, FIXTURE_RIGHT, ROOT

pytestmark = pytest.mark.browser

REAL_LABS = sorted((ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
FIXTURE_NB = "_fixture/00_fixture.ipynb"
SERVER_START_S = 90      # a cold JupyterLab server on a 2-core machine answers in ~5 s
LAB_RUN_S = 240          # the slowest lab runs ~60 s in Triton's interpreter; four times that
UI_S = 60_000            # ms, for the JupyterLab page and its widgets to appear
ERROR_SEL = '[data-mime-type="application/vnd.jupyter.error"]'

# JupyterLab user settings for a quiet, fully rendered notebook: no news/update toasts, and
# every cell kept in the DOM (windowing off) so off-screen outputs can be inspected.
_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}

# Code cells of the open notebook: prompt text, whether the source is empty, any error output.
_CELLS_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')].map(c => ({
  prompt: (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
  empty: !((c.querySelector('.jp-InputArea-editor .cm-content') || {}).textContent || '').trim(),
  error: [...c.querySelectorAll('%s')].map(e => e.innerText).join('\\n'),
}))""" % ERROR_SEL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running ``jupyter lab`` on 127.0.0.1 serving ``root``."""

    def __init__(self, root: Path, home: Path):
        self.root, self.port, self.token = root, _free_port(), secrets.token_hex(16)
        settings = home / "settings"
        for name, value in _SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if k != "INFRALENS_GRADE"}  # learners are not graded
        env.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"))
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={self.port}", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = home / "server.log"
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                self.api("/api/status")
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"jupyter lab did not answer in {SERVER_START_S} s:\n{self.log.read_text()[-3000:]}")

    def url(self, notebook: str) -> str:
        return f"http://127.0.0.1:{self.port}/lab/tree/{notebook}?reset&token={self.token}"

    def shutdown_kernels(self) -> None:
        for s in self.api("/api/sessions"):
            self.api(f"/api/sessions/{s['id']}", method="DELETE")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@pytest.fixture(scope="module")
def lab_server(fixture_labs, tmp_path_factory):
    """One JupyterLab server over a temp copy of labs/ plus the fixture notebook."""
    root = tmp_path_factory.mktemp("lab_root")
    if (ROOT / "labs").is_dir():
        shutil.copytree(ROOT / "labs", root, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (root / "_fixture").mkdir()
    shutil.copy(fixture_labs / "00_fixture.ipynb", root / FIXTURE_NB)
    server = LabServer(root, tmp_path_factory.mktemp("lab_home"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def lab_browser(chromium, lab_server):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        except Exception as exc:  # noqa: BLE001 - any launch failure means "no usable browser here"
            pytest.skip(f"Chromium at {chromium} cannot be launched: {exc}")
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        # Only the local server is reachable: the labs must not need the network.
        local = f"http://127.0.0.1:{lab_server.port}/"
        ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith((local, "data:", "blob:"))
                  else r.abort())
        ctx.set_default_timeout(UI_S)
        yield ctx
        ctx.close()
        browser.close()


@pytest.fixture(scope="module")
def shots(artifacts_dir) -> Path:
    d = artifacts_dir / "screenshots"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


# The open notebook is loaded (no spinner, all its cells in the DOM) and its kernel is started and idle.
# (While a notebook loads, JupyterLab shows a one-cell placeholder whose indicator already says idle.)
_READY_JS = """(n) => { const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!p || p.querySelector('.jp-Spinner')) return false;
  const ind = p.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernel = (p.querySelector('.jp-KernelName') || {}).textContent || '';
  return p.querySelectorAll('.jp-Cell').length === n && !!ind && ind.dataset.status === 'idle'
         && kernel.trim() !== '' && !/No Kernel/.test(kernel); }"""


def _kernel_idle(page) -> bool:
    ind = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator")
    return ind.count() > 0 and ind.first.get_attribute("data-status") == "idle"


def _open(page, url: str, n_cells: int, name: str) -> None:
    """Open a notebook and wait until it is loaded with a live, idle kernel."""
    page.goto(url)
    deadline = time.monotonic() + UI_S / 1000 * 2
    while not page.evaluate(_READY_JS, n_cells):
        dialog = page.locator(".jp-Dialog")
        if dialog.count() and "Select Kernel" in dialog.first.inner_text():
            dialog.first.locator("button", has_text=re.compile("^Select$")).click()  # no kernelspec in metadata
        assert time.monotonic() < deadline, f"{name}: notebook or kernel not ready after {UI_S * 2 // 1000} s"
        page.wait_for_timeout(300)


def _run_all(page, name: str) -> float:
    """Clear outputs, Run All Cells, wait until every non-empty code cell has an execution count
    and the kernel is idle; fails at once with the traceback if a cell raises. Returns seconds."""
    _menu(page, "Edit", "Clear Outputs of All Cells")
    t0 = time.monotonic()
    _menu(page, "Run", "Run All Cells")
    while True:
        cells = page.evaluate(_CELLS_JS)
        errors = [c["error"] for c in cells if c["error"]]
        assert not errors, f"{name}: a cell raised:\n{errors[0][-3000:]}"
        todo = [c["prompt"] for c in cells if not c["empty"] and not re.fullmatch(r"\[\d+\]:", c["prompt"].strip())]
        if not todo and _kernel_idle(page):
            return time.monotonic() - t0
        assert time.monotonic() - t0 < LAB_RUN_S, \
            f"{name}: cells still not done after {LAB_RUN_S} s (prompts {todo[:5]})"
        page.wait_for_timeout(500)


def _committed(nb_path: Path) -> dict:
    """What the committed notebook shows: PNG figures, provenance lines, widget outputs."""
    nb = nbformat.read(nb_path, as_version=4)
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "\n".join("".join(o.get("text", "")) if o.output_type == "stream" else
                     "".join(o.get("data", {}).get("text/markdown", "") or o.get("data", {}).get("text/html", "")
                             or o.get("data", {}).get("text/plain", "")) for o in outs)
    return {"cells": len(nb.cells), "figures": sum("image/png" in o.get("data", {}) for o in outs),
            "evidence": text.count("Evidence: "),
            "widgets": sum("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outs)}


def _self_check(page, name: str, shots: Path, option: int = 0) -> str:
    """Answer the first self-check widget (radio ``option``, or '1' in its text box), click Check,
    and return the feedback text that appears in its output area."""
    box = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .infralens-selfcheck").first
    box.scroll_into_view_if_needed()
    radios = box.locator("input[type=radio]")
    if radios.count():
        radios.nth(option).check()
    else:
        box.locator("input[type=text], input[type=number]").first.fill("1")
    box.locator("button", has_text="Check").click()
    feedback = box.locator(".jp-OutputArea-output")
    feedback.first.wait_for(state="visible")
    page.wait_for_function("el => el.innerText.trim().length > 0", arg=feedback.first.element_handle())
    box.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{name}_selfcheck.png"))
    return feedback.first.inner_text().strip()


def _lab_params():
    return [pytest.param(FIXTURE_NB, id="fixture")] + [pytest.param(p.name, id=p.stem) for p in REAL_LABS]


@pytest.mark.parametrize("notebook", _lab_params())
def test_lab_runs_in_jupyterlab(notebook, lab_server, lab_browser, shots, fixture_labs):
    name = Path(notebook).stem
    expect = _committed(lab_server.root / notebook)
    page = lab_browser.new_page()
    try:
        _open(page, lab_server.url(notebook), expect["cells"], name)
        took = _run_all(page, name)
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        panel.locator(".jp-Cell").first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{name}_top.png"))

        imgs = panel.locator(".jp-OutputArea-output img")
        assert imgs.count() == expect["figures"], \
            f"{name}: {imgs.count()} figures rendered, the committed notebook has {expect['figures']}"
        if expect["figures"]:
            widths = imgs.evaluate_all("els => els.map(e => e.complete ? e.naturalWidth : 0)")
            assert all(w > 0 for w in widths), f"{name}: figures that did not decode: {widths}"
            imgs.first.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / f"{name}_figure.png"))

        shown = "\n".join(panel.locator(".jp-OutputArea-output").all_inner_texts())
        assert shown.count("Evidence: ") == expect["evidence"], \
            f"{name}: {shown.count('Evidence: ')} provenance lines rendered, committed {expect['evidence']}"

        checks = panel.locator(".infralens-selfcheck")
        if expect["widgets"]:  # widget views render a moment after their cell finishes
            checks.first.wait_for(state="attached", timeout=30_000)
        assert checks.count() == expect["widgets"], \
            f"{name}: {checks.count()} self-check widgets rendered, committed {expect['widgets']} widget outputs"
        if expect["widgets"]:
            fixture = notebook == FIXTURE_NB
            feedback = _self_check(page, name, shots, option=1 if fixture else 0)
            assert feedback, f"{name}: 'Check' showed no feedback"
            if fixture:  # known content: option "3" is right
                assert FIXTURE_QUESTION in checks.first.inner_text()
                assert feedback == FIXTURE_RIGHT
        print(f"{name}: ran in {took:.1f} s; {expect}")
    except BaseException:
        page.screenshot(path=str(shots / f"{name}_failure.png"))
        raise
    finally:
        page.close()
        lab_server.shutdown_kernels()
