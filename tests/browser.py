"""Headless Chromium driven over the DevTools protocol on a pipe, to measure a rendered page.

`--dump-dom` shows what a page contains, not whether a person can see it; layout questions
("is the status column cut off at 1920 px?") need the browser's own geometry. Chromium's
`--remote-debugging-pipe` reads JSON commands on fd 3 and answers on fd 4, NUL-terminated:
no port, no websocket library, nothing leaves the machine. Runtime.evaluate runs in the
DevTools context, so the page's Content-Security-Policy does not get in the way.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")


class Browser:
    """One headless Chromium with a window of the given size; use as a context manager."""

    def __init__(self, width: int = 1920, height: int = 1080):
        self._profile = tempfile.TemporaryDirectory()
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()

        def child() -> None:  # in the child: the protocol's pipes become fds 3 and 4
            read_end, write_end = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        # close_fds=False: subprocess would otherwise close fds 3 and 4 after preexec_fn.
        self._process = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--window-size={width},{height}",
             f"--user-data-dir={self._profile.name}", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"],
            close_fds=False, preexec_fn=child, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._out = os.fdopen(to_chrome_w, "wb", buffering=0)
        self._in = os.fdopen(from_chrome_r, "rb", buffering=0)
        self._buffer, self._last_id = b"", 0

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._out.close()
        self._in.close()
        self._profile.cleanup()

    def send(self, method: str, session: str | None = None, **params: Any) -> dict:
        """Send one command and return its result (events in between are skipped)."""
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._out.write(json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = self._in.read(65536)
                if not chunk:
                    raise RuntimeError(f"chromium closed the pipe during {method}")
                self._buffer += chunk
            raw, _, self._buffer = self._buffer.partition(b"\0")
            reply = json.loads(raw)
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url: str, ready: str = "document.readyState === 'complete'") -> str:
        """Open `url` in a new tab; wait until `ready` is true; return the tab's session."""
        target = self.send("Target.createTarget", url=url)["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        deadline = time.monotonic() + 30
        # Evaluated before the document exists, too: an exception means "not yet".
        probe = f"(() => {{ try {{ return Boolean({ready}); }} catch (e) {{ return false; }} }})()"
        while not self.evaluate(session, probe):
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} not ready ({ready}) within 30 s")
            time.sleep(0.1)
        return session

    def evaluate(self, session: str, expression: str) -> Any:
        """The JSON value of `expression` in the page."""
        result = self.send("Runtime.evaluate", session, expression=expression,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, session: str, path: Path) -> None:
        """Save a PNG of the whole page (beyond the window's height) for a person to look at."""
        import base64

        data = self.send("Page.captureScreenshot", session, format="png",
                         captureBeyondViewport=False)["data"]
        path.write_bytes(base64.b64decode(data))
