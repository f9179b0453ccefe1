#!/usr/bin/env python3
"""Checks georelay's status page in a real browser: headless Chromium driven over the DevTools
protocol on a pipe (--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4), standard
library only.

It opens the page, checks from the DOM that every destination's state, pending count and bytes
and every device's last fix and position read as `georelay status --json` said (--expect), writes
a new position into the relay's Unix socket and waits, without reloading, for the page to show it,
takes screenshots at phone (390x844, light and dark) and laptop (1280 wide) sizes, and saves the rendered DOM
(for the test's secret check).

Exit status: 0 all checks passed, 1 a check failed (each failure on stderr), 77 Chromium is not
installed or cannot start here (the reason on stderr: the caller decides whether that skips).
"""
import argparse
import decimal
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


class Browser:
    """One headless Chromium and its DevTools pipe; every wait is bounded and says what for."""

    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix="georelay-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            # Chromium reads commands on fd 3 and writes answers on fd 4. Copied above 4 first: the
            # pipe's own numbers may be 3 or 4, and dup2 onto itself would keep close-on-exec.
            high = [os.dup(to_chrome_r), os.dup(from_chrome_w)]
            while min(high) <= 4:
                high = [os.dup(fd) for fd in high]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "--disable-component-update",
                "--hide-scrollbars", "--mute-audio", "--force-color-profile=srgb", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self.log = open(os.path.join(self.profile, "chromium.log"), "w+")
        self.process = subprocess.Popen(args, preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,
                                        stdout=self.log, stderr=self.log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer = b""
        self.next_id = 0
        self.session = None

    def close(self):
        try:
            if self.process.poll() is None:
                try:
                    self.send("Browser.close", session=False, timeout=5)
                except Exception:
                    pass
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=5)
        finally:
            for fd in (self.to_chrome, self.from_chrome):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def chromium_log(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-2000:]

    def send(self, method, params=None, session=True, timeout=20):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self.next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Chromium did not answer {method} within {timeout} s")
            ready, _, _ = select.select([self.from_chrome], [], [], left)
            if ready:
                chunk = os.read(self.from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed its DevTools pipe (exit {self.process.poll()}): {self.chromium_log()}")
                self.buffer += chunk

    def open_tab(self, first_answer_within):
        # The first answer waits for Chromium's start, which on a cold machine busy with the rest of
        # the suite (fontconfig's cache, a new profile, two cores shared with relays being killed)
        # has taken over 20 s; later commands answer in milliseconds.
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False, timeout=first_answer_within)
        self.session = self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def viewport(self, width, height, mobile):
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})

    def wait_for(self, expression, what, timeout):
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"waited {timeout} s for {what}")
            time.sleep(0.1)  # polling the page: the DOM has no event the pipe would deliver

    def screenshot(self, path, width, height, mobile, max_height=2400):
        self.viewport(width, height, mobile)
        # A layout pass at the new width before measuring.
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        full = min(max_height, max(height, int(self.evaluate("document.documentElement.scrollHeight"))))
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": {"x": 0, "y": 0, "width": width, "height": full, "scale": 1}})
        import base64
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        return full


# What the page shows, read from the DOM: raw values from data-value, text as the crew reads it.
READ_DOM = r"""(() => {
  const text = (el) => el ? el.textContent.trim() : null;
  const field = (card, name) => card.querySelector(`[data-field="${name}"]`);
  const destinations = {};
  for (const card of document.querySelectorAll("[data-destination]")) {
    const f = (n) => field(card, n);
    destinations[card.dataset.destination] = {
      state: f("state") && f("state").dataset.value, stateText: text(f("state")),
      pending: f("pending") && Number(f("pending").dataset.value), pendingText: text(f("pending")),
      wireBytesToday: f("wireBytesToday") && Number(f("wireBytesToday").dataset.value), wireBytesTodayText: text(f("wireBytesToday")),
      wireBytesThisMonth: f("wireBytesThisMonth") && Number(f("wireBytesThisMonth").dataset.value), wireBytesThisMonthText: text(f("wireBytesThisMonth")),
      payloadBytes: f("payloadBytes") && Number(f("payloadBytes").dataset.value), payloadBytesText: text(f("payloadBytes")),
      lastError: text(f("lastError")), chartSamples: f("chart") && Number(f("chart").dataset.samples),
      uplink: f("uplink") && f("uplink").dataset.value, uplinkText: text(f("uplink")),
    };
  }
  const uplinks = {};
  for (const card of document.querySelectorAll("[data-uplink]")) {
    const f = (n) => field(card, n);
    uplinks[card.dataset.uplink] = {
      wireBytesToday: f("wireBytesToday") && Number(f("wireBytesToday").dataset.value), todayText: text(f("wireBytesToday")),
      budgetState: f("budgetState") && f("budgetState").dataset.value, carrying: text(f("carrying")),
    };
  }
  const sbdCard = document.querySelector("[data-sbd]");
  const sbd = sbdCard && {
    device: sbdCard.dataset.sbd, signal: field(sbdCard, "sbdSignal") && field(sbdCard, "sbdSignal").dataset.value,
    creditsToday: field(sbdCard, "sbdCreditsToday") && Number(field(sbdCard, "sbdCreditsToday").dataset.value),
    creditsText: text(field(sbdCard, "sbdCreditsToday")), state: text(field(sbdCard, "sbdState")),
  };
  const devices = {};
  for (const card of document.querySelectorAll("[data-device]")) {
    const f = (n) => field(card, n);
    devices[card.dataset.device] = {
      lastFix: f("lastFix") && f("lastFix").dataset.value, lastFixText: text(f("lastFix")),
      lat: f("position") && Number(f("position").dataset.lat), lon: f("position") && Number(f("position").dataset.lon),
      positionText: text(f("position")), speedText: text(f("speed")), courseText: text(f("course")),
      trackPoints: f("track") ? Number(f("track").dataset.points) : 0,
      trackHasScaleBar: !!(f("track") && /\d+ k?m/.test(f("track").textContent)),
      sources: [...card.querySelectorAll("[data-source]")].map((s) => ({ name: s.dataset.source, active: s.dataset.active === "true" })),
      integrity: f("integrity") && f("integrity").dataset.value, integrityText: text(f("integrity")),
      stateText: text(card.querySelector("h3 .state")),
    };
  }
  return { destinations, devices, uplinks, sbd, checks: document.querySelectorAll("[data-check]").length,
           logEntries: document.querySelectorAll("#log li:not(.empty)").length };
})()"""

STATE_WORDS = {"online": "Up: sending", "backoff": "Down: waiting to retry", "probing": "Down: checking the link",
               "auth-failed": "Login refused", "deferred": "Budget spent: alarms and a position now and then", "disabled": "Disabled", "not started": "Not started yet", "stopped": "Relay stopped"}


def human_bytes(n):
    """georelay status's units (HealthChecks.bytes), which the page uses too."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{n} B"
    # Half away from zero, as the relay and the page's toFixed round (34.25 KiB is "34.3 KiB");
    # Python's own format rounds an exact half to even.
    tenths = decimal.Decimal(value).quantize(decimal.Decimal("0.1"), rounding=decimal.ROUND_HALF_UP)
    return f"{tenths} {units[unit]}"


def state_family(state):
    # A destination in backoff alternates between waiting and probing from one second to the next.
    return "down" if state in ("backoff", "probing") else state


def check_against(page, expected, failures):
    for d in expected["destinations"]:
        shown = page["destinations"].get(d["name"])
        if shown is None:
            failures.append(f"destination {d['name']}: no card on the page")
            continue
        if state_family(shown["state"]) != state_family(d["state"]):
            failures.append(f"destination {d['name']}: state {shown['state']!r} on the page, {d['state']!r} in status --json")
        if shown["stateText"] != STATE_WORDS.get(shown["state"], shown["state"]):
            failures.append(f"destination {d['name']}: state reads {shown['stateText']!r}, expected the words for {shown['state']!r}")
        if shown["pending"] != d["pending"] or not shown["pendingText"].startswith(f"{d['pending']:,} positions"):
            failures.append(f"destination {d['name']}: pending {shown['pending']} ({shown['pendingText']!r}), status --json says {d['pending']}")
        # A destination that is down still pays for its connection attempts (SYNs are billed), so
        # the relay counts on between status --json and the page: never less than it said.
        for key in ("wireBytesToday", "wireBytesThisMonth"):
            if shown[key] is None or shown[key] < d[key] or shown[key + "Text"] != human_bytes(shown[key]):
                failures.append(f"destination {d['name']}: {key} {shown[key]} ({shown[key + 'Text']!r}), status --json says {d[key]} ({human_bytes(d[key])})")
        # The application's bytes beside what the link billed, so the overhead shows.
        if shown["payloadBytes"] is None or shown["payloadBytes"] < d["payloadBytes"] or not (shown["payloadBytesText"] or "").startswith(human_bytes(shown["payloadBytes"]) + " of "):
            failures.append(f"destination {d['name']}: payloadBytes {shown['payloadBytes']} ({shown['payloadBytesText']!r}), status --json says {d['payloadBytes']}")
        if d["state"] != "online" and d.get("lastError") and not shown["lastError"]:
            failures.append(f"destination {d['name']}: status --json has lastError {d['lastError']!r}, the page shows none")
        route = d.get("uplink")
        if route is not None and (shown["uplink"] != (route.get("name") or "") or not shown["uplinkText"]):
            failures.append(f"destination {d['name']}: via {shown['uplink']!r} ({shown['uplinkText']!r}) on the page, status --json says {route}")
        if shown["chartSamples"] != len(d["history"]["rows"]):
            failures.append(f"destination {d['name']}: chart of {shown['chartSamples']} samples, status --json has {len(d['history']['rows'])}")
    for u in expected.get("uplinks", []):
        shown = page["uplinks"].get(u["name"])
        if shown is None:
            failures.append(f"uplink {u['name']}: no card on the page")
            continue
        # The relay counts on between status --json and the page: never less than it said.
        if shown["wireBytesToday"] is None or shown["wireBytesToday"] < u["wireBytesToday"]:
            failures.append(f"uplink {u['name']}: {shown['wireBytesToday']} bytes today on the page, status --json says {u['wireBytesToday']}")
        budget = u.get("budget")
        if budget and budget.get("dayBytes") and human_bytes(budget["dayBytes"]) not in (shown["todayText"] or ""):
            failures.append(f"uplink {u['name']}: today reads {shown['todayText']!r}, without its budget of {human_bytes(budget['dayBytes'])}")
        if shown["budgetState"] != ("spent" if budget and budget["spent"] else "ok"):
            failures.append(f"uplink {u['name']}: budget {shown['budgetState']!r} on the page, status --json says {budget}")
        carrying = [d["name"] for d in expected["destinations"] if (d.get("uplink") or {}).get("name") == u["name"]]
        for name in carrying:
            if name not in (shown["carrying"] or ""):
                failures.append(f"uplink {u['name']}: carrying {shown['carrying']!r} on the page, status --json routes {name} over it")
    modem = expected.get("sbd")
    if modem is not None:
        shown = page.get("sbd")
        if shown is None:
            failures.append(f"sbd {modem['device']}: no card on the page")
        else:
            signal = "" if modem.get("signal") is None else str(int(modem["signal"]))
            if shown["signal"] != signal:
                failures.append(f"sbd: signal {shown['signal']!r} on the page, status --json says {modem.get('signal')}")
            if shown["creditsToday"] != modem["creditsToday"] or f"of {modem['dailyCredits']}" not in (shown["creditsText"] or ""):
                failures.append(f"sbd: credits {shown['creditsText']!r} on the page, status --json says {modem['creditsToday']} of {modem['dailyCredits']}")
            if modem.get("service") and shown["state"] != "In service":
                failures.append(f"sbd: {shown['state']!r} on the page, status --json says the modem is in service")
    elif page.get("sbd") is not None:
        failures.append("an Iridium card on the page, and no modem in status --json")
    for d in expected["devices"]:
        shown = page["devices"].get(d["name"])
        if shown is None:
            failures.append(f"device {d['name']}: no card on the page")
            continue
        watched = d.get("integrity")
        if watched is None and shown["integrity"] is not None:
            failures.append(f"device {d['name']}: GNSS {shown['integrity']!r} on the page, and no integrity in status --json")
        elif watched is not None:
            if shown["integrity"] != watched["state"]:
                failures.append(f"device {d['name']}: GNSS {shown['integrity']!r} on the page, status --json says {watched['state']}")
            elif watched["state"] != "ok" and watched.get("evidence") and watched["evidence"] not in (shown["integrityText"] or ""):
                failures.append(f"device {d['name']}: GNSS reads {shown['integrityText']!r}, without its evidence {watched['evidence']!r}")
            if watched["state"] in ("jammed", "spoofed") and watched["state"] not in (shown["stateText"] or ""):
                failures.append(f"device {d['name']}: headed {shown['stateText']!r} while status --json says {watched['state']}")
        if shown["lastFix"] != d["lastFix"]:
            failures.append(f"device {d['name']}: last fix {shown['lastFix']!r} on the page, {d['lastFix']!r} in status --json")
        p = d.get("lastPosition")
        if p and (shown["lat"] != p["lat"] or shown["lon"] != p["lon"] or not shown["positionText"]):
            failures.append(f"device {d['name']}: position {shown['lat']},{shown['lon']} on the page, {p['lat']},{p['lon']} in status --json")
        if p and p.get("speed") is not None and shown["speedText"] != f"{p['speed'] * 1.943844:.1f} kn":
            failures.append(f"device {d['name']}: speed reads {shown['speedText']!r} for {p['speed']} m/s")
        if p and p.get("course") is not None and shown["courseText"] != f"{round(p['course'])}°":
            failures.append(f"device {d['name']}: course reads {shown['courseText']!r} for {p['course']}")
        if len(d["track"]["rows"]) > 1 and (shown["trackPoints"] < 2 or not shown["trackHasScaleBar"]):
            failures.append(f"device {d['name']}: {len(d['track']['rows'])} track points in status --json, the sketch has {shown['trackPoints']} and scale bar {shown['trackHasScaleBar']}")
        expected_sources = [{"name": s["name"], "active": s["active"]} for s in d.get("sources", [])]
        if shown["sources"] != expected_sources:
            failures.append(f"device {d['name']}: sources {shown['sources']} on the page, {expected_sources} in status --json")
    if page["checks"] != len(expected["deviceHealth"]["checks"]):
        failures.append(f"{page['checks']} health checks on the page, {len(expected['deviceHealth']['checks'])} in status --json")
    # The relay goes on logging (a destination in backoff warns every few seconds): the page may
    # show more than status --json did a moment before, never none when it had some, nor more than 12.
    if not (min(1, len(expected["log"])) <= page["logEntries"] <= 12):
        failures.append(f"{page['logEntries']} log entries on the page, {len(expected['log'])} in status --json (at most 12 shown)")


def write_position(socket_path, line, timeout=10):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        # Replies are asked for (a collector that says nothing gets none): the hello's, then the position's.
        s.sendall(b'{"hello":{"ack":true}}\n' + line.encode() + b"\n")
        reply = b""
        while reply.count(b"\n") < 2:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode().strip().split("\n")[-1]


def start_browser(binary, attempts=2, first_answer_within=60):
    """A browser with a tab open, or None once every attempt failed (said on stderr, with Chromium's log).

    A start that does not answer is tried once more with a fresh profile: a Chromium wedged in its
    first start says nothing about the page, and a skip under GEORELAY_REQUIRE_BROWSER=1 fails the run.
    """
    for attempt in range(1, attempts + 1):
        browser = None
        try:
            browser = Browser(binary)
            browser.open_tab(first_answer_within)
            return browser
        except Exception as error:  # a browser that cannot start here is a skip, said loudly, not a pass
            log = ""
            if browser is not None:
                try:
                    log = browser.chromium_log().strip()
                    browser.close()
                except Exception:
                    pass
            said = f"Chromium ({binary}) cannot start here: {error}" + (f"; its log ends: {log[-600:]}" if log else "")
            if attempt < attempts:
                print(f"attempt {attempt} of {attempts}: {said}; starting a fresh one", file=sys.stderr)
            else:
                print(f"SKIP: {said}", file=sys.stderr)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the status page, e.g. http://127.0.0.1:8080/")
    parser.add_argument("--expect", required=True, help="a file holding georelay status --json's output")
    parser.add_argument("--socket", required=True, help="the relay's ingest socket")
    parser.add_argument("--new-position", required=True, help="a JSON line to write into the socket once the page is checked")
    parser.add_argument("--new-device", required=True)
    parser.add_argument("--new-fix", required=True, help="the lastFix status --json would give the new position (ISO 8601)")
    parser.add_argument("--screenshots", required=True, help="directory for status-page-{phone,phone-dark,laptop}.png")
    parser.add_argument("--dom-out", required=True, help="file for the rendered page's HTML")
    parser.add_argument("--update-within", type=float, default=10, help="seconds the page may take to show the new position")
    args = parser.parse_args()

    binary = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not binary:
        print("SKIP: no chromium on PATH (Debian: apt-get install chromium; make test installs it)", file=sys.stderr)
        return SKIP
    with open(args.expect) as f:
        expected = json.load(f)
    browser = start_browser(binary)
    if browser is None:
        return SKIP
    failures = []
    try:
        browser.viewport(1280, 800, False)
        browser.send("Page.navigate", {"url": args.url})
        browser.wait_for("document.body && document.body.dataset.refreshed", "the page's first refresh from status.json", 20)
        browser.evaluate("window.__georelayNoReload = 1")
        page = browser.evaluate(READ_DOM)
        check_against(page, expected, failures)
        print(f"page: {len(page['destinations'])} destinations, {len(page['devices'])} devices, {page['checks']} health checks, "
              f"{page['logEntries']} log entries")

        laptop = browser.screenshot(os.path.join(args.screenshots, "status-page-laptop.png"), 1280, 800, False)
        # The phone's first screen: what the skipper sees without scrolling.
        phone = browser.screenshot(os.path.join(args.screenshots, "status-page-phone.png"), 390, 844, True, max_height=844)
        browser.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        browser.screenshot(os.path.join(args.screenshots, "status-page-phone-dark.png"), 390, 844, True, max_height=844)
        dark = browser.evaluate("getComputedStyle(document.body).backgroundColor")
        if dark != "rgb(17, 20, 24)":
            failures.append(f"prefers-color-scheme: dark gives the body {dark}, not the dark background")
        browser.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
        print(f"screenshots: laptop 1280x{laptop}, phone 390x{phone}, phone dark 390x844")
        overflow = browser.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        if overflow > 0:
            failures.append(f"at 390 px the page is {overflow} px wider than the screen")

        reply = write_position(args.socket, args.new_position)
        if not reply.startswith("ok"):
            failures.append(f"the socket answered {reply!r} to the new position")
        started = time.monotonic()
        device = json.dumps(args.new_device)
        try:
            browser.wait_for(f"""(() => {{ const c = [...document.querySelectorAll("[data-device]")].find(c => c.dataset.device === {device});
                                    const f = c && c.querySelector('[data-field="lastFix"]'); return f && f.dataset.value === {json.dumps(args.new_fix)}; }})()""",
                             f"device {args.new_device} to show its new fix {args.new_fix} without a reload", args.update_within)
            print(f"new position shown after {time.monotonic() - started:.1f} s")
        except TimeoutError as error:
            failures.append(str(error))
        if browser.evaluate("window.__georelayNoReload") != 1:
            failures.append("the page was reloaded to show the new position")
        with open(args.dom_out, "w") as f:
            f.write(browser.evaluate("document.documentElement.outerHTML"))
    except Exception as error:
        failures.append(f"{type(error).__name__}: {error}")
    finally:
        browser.close()
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
