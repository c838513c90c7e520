"""The incident page (`earlylog report --html`) in a real headless Chromium: real processes (one
stuck, one crashed by a segfault, one exiting, under one parent) are written up with the command,
the page is opened from file://, lanes and marks are clicked like a user would (mouse events over
the Chrome DevTools protocol on --remote-debugging-pipe, standard library only) and the DOM and a
screenshot are checked."""
import base64
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

from earlylog.read import html, logread, verdict
from support import PYTHON, TIMEOUT, clean_env, log_files, read, script, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import bench_logs  # noqa: E402  (the benchmark's synthetic folders: real line format, any size)

EVIL = "</script><img src=x onerror=alert(1)>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = os.environ.get("EARLYLOG_TEST_SHOTS")  # a folder to keep the screenshots in, for a person to look at


def _high(fd):
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Chromium:
    """Headless Chromium driven over its DevTools pipe (fd 3 in, fd 4 out, NUL-ended JSON)."""

    def __init__(self, profile, width=1400, height=1000):
        to_chrome, self.out = os.pipe()
        self.inp, from_chrome = os.pipe()
        # The pipe ends must be fds 3 and 4 in Chromium; bash places them there (dash only knows
        # fds 0-9), from fds above 9 so that neither redirection overwrites the other's source.
        to_chrome, from_chrome = (_high(fd) for fd in (to_chrome, from_chrome))
        cmd = ["bash", "-c", 'exec "$0" "$@" 3<&%d 4>&%d' % (to_chrome, from_chrome), CHROMIUM,
               "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--mute-audio",
               "--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank"]
        self.proc = subprocess.Popen(cmd, pass_fds=(to_chrome, from_chrome), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_chrome)
        os.close(from_chrome)
        self.buf, self.events, self.next_id, self.session = b"", [], 0, None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        # A script that reached the page would call alert(): make that leave a trace instead.
        self.send("Page.addScriptToEvaluateOnNewDocument",
                  source="window.alert = function () { window.__alerted = true; };")

    def _message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                raise AssertionError("chromium did not answer in time")
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise AssertionError("chromium closed its DevTools pipe")
            self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\0")
        return json.loads(raw)

    def send(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, (method, reply["error"])
                return reply.get("result", {})
            self.events.append(reply)

    def open(self, url, reload=False):
        """Load url and wait for its load event (reload=True loads the page shown again, as a
        change of its #fragment alone would not)."""
        self.events = []
        if reload:
            self.send("Page.reload")
        else:
            self.send("Page.navigate", url=url)
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._message(deadline))

    def js(self, expression):
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in res, res["exceptionDetails"]
        return res["result"].get("value")

    def click(self, selector):
        """A real mouse click at the middle of the first element matching selector."""
        box = self.js("(function(){var e=document.querySelector(%s); if(!e) return null; e.scrollIntoView("
                      "{block:'nearest'}); var r=e.getBoundingClientRect(); return [r.left+r.width/2, "
                      "r.top+r.height/2];})()" % json.dumps(selector))
        assert box is not None, "nothing on the page matches %s" % selector
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def shown(self, selector):
        """The text of each element matching selector that a person can see (a closed <details>
        keeps its content laid out but hidden: checkVisibility knows, getClientRects does not)."""
        return self.js("[...document.querySelectorAll(%s)].filter(e => e.checkVisibility())"
                       ".map(e => e.textContent)" % json.dumps(selector))

    def screenshot(self):
        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])

    def close(self):
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=TIMEOUT)
            os.close(self.inp)
            os.close(self.out)


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium package)")
    with tempfile.TemporaryDirectory() as profile:
        browser = Chromium(profile)
        try:
            yield browser
        finally:
            browser.close()


def png_pixels(data):
    """(width, height, rows of RGB(A) bytes) of a non-interlaced 8-bit PNG, decoded with zlib."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # the five PNG filters, undone in place
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colours(data):
    """The set of RGB colours in a PNG screenshot."""
    width, _height, bpp, rows = png_pixels(data)
    seen = set()
    for line in rows:
        seen.update(line[i:i + 3] for i in range(0, width * bpp, bpp))
    return seen


def rgb(hex_colour):
    return bytes.fromhex(hex_colour.lstrip("#"))


def start(path, logdir):
    full = clean_env(EARLYLOG=1, EARLYLOG_DIR=logdir, EARLYLOG_STALL=1, EARLYLOG_CONSOLE="off")
    return subprocess.Popen([PYTHON, path], env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def earlylog(*args):
    return subprocess.run([PYTHON, "-m", "earlylog"] + [str(a) for a in args], env=clean_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)


JOB = """
    import ctypes, subprocess, sys, threading, time
    import earlylog.phases

    def wait_forever():
        threading.Event().wait()

    def crash_here():
        ctypes.string_at(0)

    if sys.argv[1:2] == ["stuck"]:
        with earlylog.phases.phase("fetch config"):
            wait_forever()
    elif sys.argv[1:2] == ["crash"]:
        time.sleep(0.3)
        crash_here()
    elif sys.argv[1:2] == ["exit"]:
        with earlylog.phases.phase("load <img src=x onerror=alert(2)> data"):
            time.sleep(0.3)
    elif sys.argv[1:2] == ["serve"]:
        import socketserver
        socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler).serve_forever()
    else:
        kids = [subprocess.Popen([sys.executable, __file__] + a) for a in
                (["stuck"], ["crash"], ["exit", %r], ["serve"])]
        for kid in kids:
            kid.wait()
    """ % EVIL


@pytest.mark.slow
def test_clicking_a_lane_shows_its_stacks_user_frame_first(tmp_path, logdir, chromium):
    proc = start(script(tmp_path, JOB, "job.py"), logdir)
    try:
        def ready():  # the parent and the stuck child dumped their stacks, the others ended
            logs = [read(f) for f in log_files(logdir)]
            return sum("dump: stall" in text for text in logs) == 3 and \
                any("Fatal Python error" in text for text in logs) and any("exit: status 0" in text for text in logs)
        wait_for(ready)
        page = tmp_path / "incident.html"
        out = earlylog("report", "--html", page, logdir)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
    assert out.returncode == 1 and "wrote %s" % page in out.stdout, out.stderr
    source = page.read_text()
    assert "<img" not in source and "http://" not in source and "https://" not in source  # escaped; offline
    rep = verdict.judge(logread.read(str(logdir)))
    stuck, crashed, done, server = (next(p["pid"] for p in rep["processes"] if "job.py " + word in p["command"])
                                    for word in ("stuck", "crash", "exit", "serve"))

    chromium.open(page.as_uri())
    lanes = chromium.js("[...document.querySelectorAll('.lane')].map(e => [+e.dataset.pid, e.dataset.state,"
                        " e.querySelector('.label').style.paddingLeft])")
    # one lane per process, in tree order: the parent first, its four children indented under it
    assert [lane[1] for lane in lanes][0] == "stalled" and len(lanes) == 5
    assert {lane[0]: lane[1] for lane in lanes} == {stuck: "stalled", crashed: "crashed", done: "exited",
                                                   server: "idle", lanes[0][0]: "stalled"}
    assert len({lane[2] for lane in lanes[1:]}) == 1 and lanes[1][2] != lanes[0][2]
    assert chromium.js("document.querySelector('h1').textContent") == "3 of 5 processes in trouble: 2 stuck, 1 crashed"
    # the stuck lane is hatched from its stall on, with the stall mark; the idle server's is plain
    band = "document.querySelector('.lane[data-pid=\"%d\"] .band').className"
    assert chromium.js(band % stuck) == "band" and chromium.js(band % server) == "band idle"
    marks = "document.querySelectorAll('.lane[data-pid=\"%d\"] [data-mark=stall]').length"
    assert chromium.js(marks % stuck) == 1 and chromium.js(marks % server) == 0
    assert chromium.js("document.querySelectorAll('.legend span').length") >= 10

    # a click on the stuck child's lane: its stall stack, its own frame first, threading's folded
    chromium.click('.lane[data-pid="%d"] .label' % stuck)
    assert chromium.js("document.querySelector('#detail h2').textContent").endswith("pid %d" % stuck)
    shown = chromium.shown("#detail [data-stacks-of=stall] .fr")
    assert shown[0].startswith("wait_forever") and "job.py:6" in shown[0], shown
    assert not any("threading" in line for line in shown), shown
    folded = "#detail [data-stacks-of=stall] details.lib > summary"
    assert "threading.py" in chromium.js("document.querySelector(%s).textContent" % json.dumps(folded))
    chromium.click(folded)
    assert any("threading.py" in line for line in chromium.shown("#detail .fr.lib"))

    # a click on the crash mark: the crash stack, crash_here before ctypes' string_at
    chromium.click('.lane[data-pid="%d"] [data-mark=crashed]' % crashed)
    assert "Segmentation fault (SIGSEGV)" in chromium.js("document.getElementById('detail').textContent")
    shown = chromium.shown("#detail [data-stacks-of=crash] .fr")
    assert shown[0].startswith("crash_here") and not any("string_at" in line for line in shown), shown

    # the exiting child: its argv and phase names arrive as text, never as markup
    chromium.click('.lane[data-pid="%d"] .label' % done)
    detail = chromium.js("document.getElementById('detail').textContent")
    assert EVIL in detail and "load <img src=x onerror=alert(2)> data" in detail
    assert chromium.js("document.querySelectorAll('img').length") == 0
    assert chromium.js("window.__alerted === undefined")

    chromium.click('.lane[data-pid="%d"] .label' % stuck)
    shot = chromium.screenshot()
    if SHOTS:
        with open(os.path.join(SHOTS, "incident.png"), "wb") as f:
            f.write(shot)
    seen = colours(shot)
    assert len(seen) > 50  # text, bars and marks, not a blank page
    for name, colour in (("crash mark", "#d93025"), ("stall mark", "#e8a317"), ("exit mark", "#1e8e3e"),
                         ("phase bar", "#8ab4f8")):
        assert rgb(colour) in seen, "no %s in the screenshot" % name


def test_text_from_logs_never_becomes_markup(tmp_path):
    """The header is rendered in Python: causes, verdict lines and notes are escaped there too."""
    rep = verdict.judge(logread.read(str(tmp_path)))
    rep["causes"] = [{"kind": EVIL, "text": "thread " + EVIL, "next": EVIL, "pids": [7], "threads": [EVIL]}]
    rep["verdict"].append("a line about " + EVIL)
    rep["problems"].append(EVIL)
    text = html.page(rep)
    assert "<img" not in text and text.count("</script>") == 2  # the page's own two blocks only
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in text


def test_a_thousand_processes_stay_small_and_quick(tmp_path, chromium):
    folder = bench_logs.make(str(tmp_path / "run"), 1000, size=3000)
    rep = verdict.judge(logread.read(folder))
    text = html.page(rep)
    assert len(text.encode()) < 1.5e6, len(text.encode())
    page = tmp_path / "big.html"
    page.write_text(text)
    chromium.open(page.as_uri())
    # a big run opens on the processes in trouble; the lanes in the DOM are only those in view
    assert chromium.js("document.getElementById('shown').textContent") == "showing 100 of 1000"
    assert 0 < chromium.js("document.querySelectorAll('.lane').length") < 80
    chromium.click("#f-all")
    assert 0 < chromium.js("document.querySelectorAll('.lane').length") < 80
    hosts = chromium.js("[...document.querySelectorAll('.host')].map(e => e.dataset.host)")
    assert hosts[:1] == ["gpu-node-01"]
    chromium.js("document.getElementById('lanes').scrollTop = 1e9")
    time.sleep(0.2)  # one animation frame
    last = chromium.js("[...document.querySelectorAll('.lane')].map(e => +e.dataset.pid)")
    assert last and max(last) > 10900  # the end of the list is drawn when scrolled there
    chromium.click('.lane[data-pid="%d"] .label' % last[-1])
    assert chromium.js("document.querySelector('#detail h2').textContent").endswith("pid %d" % last[-1])
    # a link to one process opens the page on it
    chromium.js("location.hash = '#pid=gpu-node-02/10001'")
    chromium.open(None, reload=True)
    assert chromium.js("document.querySelector('#detail .sub').textContent").startswith("host gpu-node-02")
    assert chromium.js("document.querySelector('.lane.sel').dataset.pid") == "10001"
