"""The quickstart notebook's dashboard in a real browser: JupyterLab driven by headless chromium.

One test, end to end: start JupyterLab on 127.0.0.1 with a token, open a
parameterised copy of ``notebooks/00_quickstart.ipynb`` in Debian's chromium
(Playwright, no browser download), run all cells and check that

1. the dashboard's controls render (CSS classes ``lmstream-<key>``);
2. the live latency figure gains points while batches complete (its plotly
   div's ``data[i].y.length``, sampled while the stream runs);
3. moving the inflection-point slider with the keyboard changes the value in
   the kernel (``stream.mapper.snapshot()["inflection_point"]``).

No request may leave 127.0.0.1: the page's requests to anywhere else are
aborted and counted, and the test fails if any was attempted (beyond
``ALLOWED_OUTSIDE``).  JupyterLab's own outside fetches (news, update check,
PyPI extension listing) are switched off on the server's command line and in
the user settings.  Screenshots go to ``$LMSTREAM_ARTIFACTS`` (or the test's
``tmp_path``); their paths are printed.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "00_quickstart.ipynb"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
CONTROLS = ("inflection_point", "slide_s", "target_s", "policy", "rate_scale", "optimizer")
# URL prefixes outside 127.0.0.1 that the page may try (and is refused); none is needed
ALLOWED_OUTSIDE: tuple[str, ...] = ()
RUN_LIMIT_S = 200  # from opening the notebook to its last cell (the test's own timeout is 300 s)
MIN_BATCHES = 8  # data batches the notebook waits for (before + after the slider moves): enough to watch

# Kernel side: the mapper's inflection point and the dashboard slider's value
KERNEL_PROBE = (
    "(float(stream.mapper.snapshot()['inflection_point']), float(dash.controls['inflection_point'].value))"
)

# User settings that keep the lab quiet and every cell in the DOM
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # "none": cells out of view stay rendered, so their plotly divs can be read
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}

# One sample of every plotly div: its title, whether it is live (the dashboard's
# FigureWidget, not a static snapshot) and its number of y values
PLOTLY_SAMPLE_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
  const t = (el.layout && el.layout.title) || '';
  const title = typeof t === 'string' ? t : (t.text || '');
  const count = (traces) => (traces || []).reduce((n, tr) => {
    const y = tr && tr.y;
    return n + (y && typeof y.length === 'number' ? y.length : 0);
  }, 0);
  let points = count(el.data);
  if (!points && el._fullData) points = count(el._fullData);  // base64-encoded arrays
  // a static snapshot renders through plotly's mimetype renderer (or as HTML), a FigureWidget does not
  const live = !!el.closest('.jupyter-widgets')
    || !el.closest('.jp-RenderedPlotly, .jp-RenderedHTMLCommon');
  const latency = !!el.closest('.lmstream-figure-latency') || title.toLowerCase().includes('latency');
  return {title, live, latency, points, traces: (el.data || []).length};
})"""

NOTEBOOK_PANEL_JS = "window.jupyterapp && window.jupyterapp.shell.currentWidget"
KERNEL_STATUS_JS = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return k ? k.status : null;
}"""
# Runs all cells without waiting; window.__lmRun turns "ok" or "failed" when they are done
RUN_ALL_JS = """() => {
  window.__lmRun = 'running';
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    ok => { window.__lmRun = ok ? 'ok' : 'failed'; },
    err => { window.__lmRun = 'error: ' + err; });
}"""
# Error outputs and tracebacks on stderr, from the notebook model
NOTEBOOK_ERRORS_JS = """() => {
  const cells = window.jupyterapp.shell.currentWidget.content.model.toJSON().cells;
  const found = [];
  cells.forEach((cell, i) => (cell.outputs || []).forEach(out => {
    const text = Array.isArray(out.text) ? out.text.join('') : (out.text || '');
    if (out.output_type === 'error') found.push(`cell ${i}: ${out.ename}: ${out.evalue}`);
    else if (out.name === 'stderr' && text.includes('Traceback')) found.push(`cell ${i}: ${text.slice(-600)}`);
  }));
  return found;
}"""


# --------------------------------------------------------------------------- helpers


def _playwright_sync_api():
    """Playwright's sync API and Debian's chromium, or skip (fail when the browser is required)."""
    reason = None
    if not Path(CHROMIUM).exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
    else:
        try:
            from playwright import sync_api
        except ImportError:
            reason = "playwright is not installed (pip install playwright; no `playwright install`)"
    if reason is None:
        return sync_api
    if os.environ.get("LMSTREAM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LMSTREAM_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or parts.hostname == "127.0.0.1"


def _wait_for(check, timeout: float, what: str, interval: float = 0.25):
    """Poll ``check()`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _descendants(pid: int) -> list[int]:
    """Pids of every live descendant of ``pid`` (kernels run in their own sessions)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _prepare_notebook(dest: Path, run_dir: Path) -> dict:
    """Write a copy of the quickstart with its parameters injected (papermill, not executed)."""
    import nbformat
    import papermill

    declared = papermill.inspect_notebook(str(NOTEBOOK))
    missing = {"run_dir", "batches"} - set(declared)
    assert not missing, f"the parameters cell lacks {sorted(missing)}: it has {sorted(declared)}"

    def default(name: str, fallback: int = 0) -> int:
        try:
            return int(ast.literal_eval(declared[name]["default"]))
        except (KeyError, TypeError, ValueError, SyntaxError):
            return fallback

    after = default("batches_after")
    params = {"run_dir": str(run_dir), "batches": max(default("batches"), MIN_BATCHES - after)}
    nb = papermill.execute_notebook(
        str(NOTEBOOK), None, parameters=params, prepare_only=True, progress_bar=False, log_output=False
    )
    # the lab starts this venv's python: the server's own "python3" kernelspec
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nbformat.write(nb, str(dest))
    return params


class _Lab:
    """A JupyterLab server subprocess on 127.0.0.1 with a token, in its own process group."""

    def __init__(self, base: Path, root_dir: Path):
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.runtime_dir = base / "runtime"
        self.log_path = base / "jupyter.log"
        settings = base / "settings"
        for name, values in LAB_SETTINGS.items():
            path = settings / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ)
        for var in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTERLAB_SETTINGS_DIR",
                    "JUPYTERLAB_WORKSPACES_DIR"):
            env.pop(var, None)
        env.update(
            JUPYTER_CONFIG_DIR=str(base / "config"),  # no user config leaks in
            JUPYTER_DATA_DIR=str(base / "data"),
            JUPYTER_RUNTIME_DIR=str(self.runtime_dir),
            IPYTHONDIR=str(base / "ipython"),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            PYTHONUNBUFFERED="1",
        )
        cmd = [
            sys.executable, "-m", "jupyter", "lab",
            "--allow-root", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.expose_app_in_browser=True",
            # nothing fetched from outside: news feed, update check, PyPI extension listing
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={base / 'workspaces'}",
            "--LanguageServerManager.autodetect=False",
        ]
        with open(self.log_path, "wb") as log:  # the server keeps its own copy of the descriptor
            self.proc = subprocess.Popen(cmd, cwd=root_dir, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def api(self, path: str, method: str = "GET", timeout: float = 10):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def wait_ready(self, timeout: float = 90) -> None:
        def ready():
            if self.proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                return self.api("/api/status", timeout=2) is not None
            except (OSError, urllib.error.URLError):
                return False

        _wait_for(ready, timeout, f"jupyter lab on {self.url}", interval=0.5)

    def kernel_id(self) -> str:
        sessions = self.api("/api/sessions")
        assert len(sessions) == 1, f"expected one kernel session, got {sessions}"
        return sessions[0]["kernel"]["id"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            descendants = _descendants(self.proc.pid)
            try:  # let the server shut its kernels down (they have their own sessions)
                for kernel in self.api("/api/kernels", timeout=5):
                    self.api(f"/api/kernels/{kernel['id']}", method="DELETE", timeout=30)
            except (OSError, urllib.error.URLError, ValueError):
                pass
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            for pid in descendants:  # whatever the server left behind
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class _KernelProbe:
    """Reads values from the notebook's kernel on its connection file (silent, off the page)."""

    def __init__(self, connection_file: Path):
        from jupyter_client import BlockingKernelClient

        self.client = BlockingKernelClient(connection_file=str(connection_file))
        self.client.load_connection_file()
        self.client.start_channels()

    def eval(self, expression: str, timeout: float = 30):
        msg_id = self.client.execute("", silent=True, store_history=False,
                                     user_expressions={"value": expression})
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self.client.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the kernel did not answer within {timeout:.0f} s")
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        result = reply["content"]["user_expressions"]["value"]
        assert result["status"] == "ok", f"{expression} failed in the kernel: {result}"
        return ast.literal_eval(result["data"]["text/plain"])

    def close(self) -> None:
        self.client.stop_channels()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def artifacts(tmp_path) -> Path:
    path = Path(os.environ.get("LMSTREAM_ARTIFACTS") or tmp_path / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser():
    sync_api = _playwright_sync_api()
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def lab(tmp_path):
    if not NOTEBOOK.exists():
        pytest.fail(f"{NOTEBOOK.relative_to(ROOT)} is missing")
    root_dir = tmp_path / "lab"
    root_dir.mkdir()
    params = _prepare_notebook(root_dir / NOTEBOOK.name, tmp_path / "run")
    server = _Lab(tmp_path, root_dir)
    print(f"\nnotebook parameters: {params}")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- the test


def _shoot(page, path: Path, element=None) -> None:
    from playwright.sync_api import Error as PlaywrightError

    try:
        (element or page).screenshot(path=str(path))
        print(f"\nscreenshot: {path}")
    except (PlaywrightError, OSError) as exc:  # a screenshot must never hide the test's own failure
        print(f"\nscreenshot {path} failed: {exc}")


def _latency_points(page) -> int | None:
    """Points in the live latency figure(s), or None while none has rendered."""
    plots = [p for p in page.evaluate(PLOTLY_SAMPLE_JS) if p["live"] and p["latency"]]
    return sum(p["points"] for p in plots) if plots else None


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quickstart_dashboard_renders_grows_and_slider_reaches_kernel(browser, lab, artifacts):
    t0 = time.monotonic()
    context = browser.new_context(viewport={"width": 1400, "height": 1100}, service_workers="block")
    refused: list[str] = []  # requests the page tried to send outside 127.0.0.1
    sockets: list[str] = []

    def route(r):
        if _is_local(r.request.url):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("websocket", lambda ws: sockets.append(ws.url))

    def assert_offline():  # nothing left 127.0.0.1, and the UI needed nothing from outside
        unexpected = [u for u in refused if not u.startswith(ALLOWED_OUTSIDE)]
        assert not unexpected, f"the page tried {len(unexpected)} outside request(s): {unexpected[:10]}"
        assert all(_is_local(u.replace("ws", "http", 1)) for u in sockets), f"outside websocket: {sockets}"

    probe = None
    try:
        page.goto(f"{lab.url}/lab/tree/{NOTEBOOK.name}?token={lab.token}")
        page.wait_for_function(f"() => {{ const w = {NOTEBOOK_PANEL_JS}; "
                               f"return w && w.context && w.context.path === '{NOTEBOOK.name}'; }}",
                               timeout=90_000)
        _wait_for(lambda: page.evaluate(KERNEL_STATUS_JS) == "idle", 90, "the notebook's kernel")
        t_open = time.monotonic() - t0

        page.evaluate(RUN_ALL_JS)

        # (1) the dashboard's controls render
        def run_state() -> str:
            return page.evaluate("() => window.__lmRun")

        def hidden() -> list[str]:
            return [k for k in CONTROLS if not page.locator(f".lmstream-{k}").first.is_visible()]

        # the live latency figure is sampled from the start: on a loaded machine the controls can
        # render after several batches, and the growth that happened meanwhile counts too
        samples: list[int] = []

        def sample() -> None:
            points = _latency_points(page)
            if points is not None and (not samples or points != samples[-1]):
                samples.append(points)

        def controls_shown() -> bool:
            sample()
            return not hidden() or run_state() != "running"

        _wait_for(controls_shown, RUN_LIMIT_S, "the dashboard's controls")
        assert not hidden(), (f"controls not rendered: {hidden()} (notebook {run_state()}, "
                              f"errors {page.evaluate(NOTEBOOK_ERRORS_JS)})")
        t_controls = time.monotonic() - t0

        # (2) the live latency figure gains points while the stream runs
        while run_state() == "running":
            sample()
            if time.monotonic() - t0 > RUN_LIMIT_S:
                pytest.fail(f"the notebook still runs after {RUN_LIMIT_S} s; latency points seen: {samples}")
            time.sleep(0.3)
        t_run = time.monotonic() - t0
        errors = page.evaluate(NOTEBOOK_ERRORS_JS)
        assert run_state() == "ok" and not errors, f"the notebook failed ({run_state()}): {errors}"
        assert_offline()
        stderr_tracebacks = page.locator(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
            has_text="Traceback").count()
        assert stderr_tracebacks == 0, "a cell printed a traceback on stderr"
        growth = sum(b > a for a, b in itertools.pairwise(samples))
        assert samples and samples[-1] > samples[0] and growth >= 2, (
            f"the live latency figure did not grow while batches completed: {samples}")

        # (3) the slider, moved in the browser, changes the kernel's inflection point;
        # comm messages reach the kernel only once it is idle (all cells done)
        kernel_id = lab.kernel_id()
        _wait_for(lambda: lab.api(f"/api/kernels/{kernel_id}")["execution_state"] == "idle", 30,
                  "the kernel to go idle")
        probe = _KernelProbe(lab.runtime_dir / f"kernel-{kernel_id}.json")
        before, _ = probe.eval(KERNEL_PROBE)
        slider = page.locator(".lmstream-inflection_point").first
        handle = slider.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        now, top = (float(handle.get_attribute(a) or "nan") for a in ("aria-valuenow", "aria-valuemax"))
        at_max = now >= top  # then move it down instead
        handle.focus()
        for _ in range(3):
            page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
            time.sleep(0.1)

        def moved():
            value = probe.eval(KERNEL_PROBE)
            return value if value[0] != before else None

        after, slider_value = _wait_for(
            moved, 30, f"the kernel's inflection point to leave {before:g} after the slider moved")
        assert after == pytest.approx(slider_value, rel=1e-9), (
            f"the kernel's inflection point {after:g} is not the slider's value {slider_value:g}")
        readout = slider.locator(".widget-readout").first.inner_text().strip()
        assert float(readout) == pytest.approx(after, rel=0.01), (
            f"the slider shows {readout} but the kernel holds {after:g}")

        assert_offline()

        slider.scroll_into_view_if_needed()
        _shoot(page, artifacts / "browser_quickstart.png")
        # the whole dashboard: a viewport tall enough that the notebook does not clip it
        dashboard = page.locator(".jp-OutputArea-output", has=page.locator(".lmstream-inflection_point")).first
        height = dashboard.bounding_box()["height"]
        page.set_viewport_size({"width": 1400, "height": int(min(4000, height + 400))})
        dashboard.scroll_into_view_if_needed()
        time.sleep(1)  # plotly relayouts to the new size
        _shoot(page, artifacts / "browser_quickstart_dashboard.png", dashboard)
        print(f"\nbrowser test: lab open {t_open:.1f} s, controls {t_controls:.1f} s, "
              f"all cells {t_run:.1f} s, total {time.monotonic() - t0:.1f} s; "
              f"latency points {samples}; inflection point {before:g} -> {after:g} "
              f"(readout {readout}); outside requests refused: {len(refused)}")
    except BaseException:
        _shoot(page, artifacts / "browser_quickstart_failure.png")
        print(f"\njupyter log tail:\n{lab.log_tail()}")
        raise
    finally:
        if probe is not None:
            probe.close()
        context.close()
