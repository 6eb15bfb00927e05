#!/usr/bin/python3
"""console-drive.py -- drives the ioa console in headless Chromium for
t/250-console.t: one scenario per run, what it saw printed as JSON lines
{"check": NAME, "value": ...} for the Perl test to assert on.

  /usr/bin/python3 t/lib/console-drive.py --url http://127.0.0.1:PORT \
      --shots DIR SCENARIO [--token T] [--bad T] [--noscope T] [--cid C] ...

Scenarios: static, signin, goals, room (see each function).  Every wait
has a deadline and ends the run with "timeout: <what>" rather than
hanging; the test kills this process (and it kills Chromium and
chromedriver by PID) whatever happens.  Screenshots go to --shots.

Design: selenium 4 from Debian (python3-selenium) with chromium-driver,
run by /usr/bin/python3.  The page is read the way a person reads it (the
visible text of elements, by id), plus a few facts no person sees (the
document's scroll width, the number of <img> elements, sessionStorage).
"""

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException,
                                        StaleElementReferenceException,
                                        WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ARGS = None
DRIVER = None
SERVICE = None
PROFILE = None


def out(check, value):
    print(json.dumps({"check": check, "value": value}), flush=True)


class Timeout(Exception):
    pass


def wait(what, cond, secs=15):
    """cond() until it is truthy (its value is returned) or secs pass."""
    deadline = time.time() + secs
    last_err = None
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (StaleElementReferenceException, WebDriverException) as e:
            last_err = e
        time.sleep(0.1)
    raise Timeout(f"{what} (after {secs} s{'; ' + str(last_err).splitlines()[0] if last_err else ''})")


def start_browser(width=1280, height=900):
    global DRIVER, SERVICE, PROFILE
    PROFILE = tempfile.mkdtemp(prefix="console-drive-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
              "--disable-gpu", "--no-first-run", "--disable-extensions",
              "--disable-background-networking", "--hide-scrollbars",
              f"--window-size={width},{height}", f"--user-data-dir={PROFILE}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    SERVICE = Service("/usr/bin/chromedriver",
                      log_path=os.path.join(ARGS.shots, "chromedriver.log"))
    DRIVER = webdriver.Chrome(service=SERVICE, options=opts)
    DRIVER.set_page_load_timeout(20)
    DRIVER.set_script_timeout(20)


def children_of(pid):
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            kids.append(int(d))
    return kids


def stop_browser():
    """quit, then kill by PID whatever chromedriver started and left"""
    tree = []
    if SERVICE and SERVICE.process:
        todo = [SERVICE.process.pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(children_of(p))
    if DRIVER:
        try:
            DRIVER.quit()
        except Exception:
            pass
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    if SERVICE and SERVICE.process:
        try:
            SERVICE.process.wait(5)
        except Exception:
            pass
    if PROFILE:
        shutil.rmtree(PROFILE, ignore_errors=True)


def console(hash_="", reload=False):
    url = f"{ARGS.url}/console/{hash_}"
    if reload:
        DRIVER.refresh()
    else:
        DRIVER.get(url)
    wait("the console starts", lambda: DRIVER.execute_script(
        "return document.body.dataset.ready === '1'"))


def go(hash_):
    DRIVER.execute_script("location.hash = arguments[0]", hash_)


def el(css):
    return DRIVER.find_element(By.CSS_SELECTOR, css)


def els(css):
    return DRIVER.find_elements(By.CSS_SELECTOR, css)


def text(css):
    """the first match's text, "" if none; a view re-rendered between the
    find and the read (a live page does that) is read again"""
    for _ in range(50):
        try:
            found = els(css)
            return found[0].text if found else ""
        except StaleElementReferenceException:
            time.sleep(0.05)
    return ""


def shot(name, whole=True):
    path = os.path.join(ARGS.shots, name)
    if not whole:
        DRIVER.save_screenshot(path)
        out("shot", path)
        return None
    # the whole page: as tall as its content, for a screenshot a person reads
    h = DRIVER.execute_script("return document.documentElement.scrollHeight")
    w = DRIVER.execute_script("return window.innerWidth")
    size = DRIVER.get_window_size()
    DRIVER.set_window_size(size["width"], max(size["height"], min(h + 140, 4000)))
    time.sleep(0.2)
    DRIVER.save_screenshot(path)
    DRIVER.set_window_size(size["width"], size["height"])
    out("shot", path)
    return w


def js_errors():
    """the browser console's errors that are not the network's own lines
    (Chromium logs every 4xx answer as "Failed to load resource")"""
    errs = []
    for e in DRIVER.get_log("browser"):
        if e.get("level") != "SEVERE":
            continue
        if "Failed to load resource" in e.get("message", ""):
            continue
        errs.append(e["message"])
    return errs


def no_alert():
    try:
        DRIVER.switch_to.alert.text
        return False
    except NoAlertPresentException:
        return True


def fill(css, value):
    e = el(css)
    e.clear()
    e.send_keys(value)


def hub(method, path, body=None, token=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(ARGS.url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def signin(token):
    go("#/signin")
    wait("the sign-in form", lambda: els("#token"))
    fill("#token", token)
    el("#signin button[type=submit]").click()


# ---------------------------------------------------------------- scenarios

def scenario_signin():
    """auth on: a bad token (401), a token without the scope (403), sign
    out, sign in; the agents (presence, record, an XSS description), the
    search, a room with a <script> envelope"""
    console()
    wait("the sign-in view without a token", lambda: els("#token"))
    out("signin_first", DRIVER.execute_script("return location.hash"))

    signin(ARGS.bad)
    msg = wait("the 401 message", lambda: text("#signin-message"))
    out("bad_token_message", msg)
    out("stored_after_bad", DRIVER.execute_script("return sessionStorage.length"))
    shot("signin-401.png")

    signin(ARGS.noscope)
    wait("the agents view", lambda: "agents" in DRIVER.current_url and els("#agents-out .notice"))
    out("forbidden_message", text("#agents-out"))
    out("who_noscope", text("#who"))
    go("#/launch")
    wait("the launch form", lambda: els("#launch-submit"))
    out("launch_disabled", not el("#launch-submit").is_enabled())
    out("launch_hint", text("#launch-submit-needs"))
    go("#/goals")
    wait("the goals view", lambda: text("#goals-out") and "Loading" not in text("#goals-out"))
    out("goals_noscope", text("#goals-out"))

    el("#signout").click()
    wait("signed out", lambda: els("#token"))
    out("storage_after_signout", DRIVER.execute_script("return sessionStorage.length"))

    signin(ARGS.token)
    wait("the goals view after sign-in", lambda: "#/goals" in DRIVER.current_url)
    out("who", text("#who"))
    out("token_in_storage", DRIVER.execute_script(
        "return Object.keys(sessionStorage).some(k => sessionStorage.getItem(k) === arguments[0])",
        ARGS.token))

    go("#/agents")
    wait("the agent list", lambda: els("#agent-list li"))
    agents = {}
    for card in els("#agent-list > li"):
        agents[card.get_attribute("data-agent")] = {
            "presence": card.find_element(By.CSS_SELECTOR, ".presence").text,
            "desc": card.find_element(By.CSS_SELECTOR, ".desc").text,
            "record": card.find_element(By.CSS_SELECTOR, ".record").text,
        }
    out("agents", agents)
    out("img_elements", len(els("img")))
    out("no_alert", no_alert())
    shot("agents.png")

    fill("#agent-q", ARGS.query)
    el("form.search button").click()
    wait("search results", lambda: "q=" in DRIVER.current_url and els("#agent-list li")
         or els("#agents-out .notice"))
    out("search", [e.get_attribute("data-agent") for e in els("#agent-list > li")])
    out("search_text", text("#agents-out"))

    go("#/rooms")
    wait("the room list", lambda: els("#room-list li"))
    out("rooms", text("#room-list"))
    go(f"#/rooms/{ARGS.cid}")
    wait("the room's transcript", lambda: len(els("#transcript > li")) >= ARGS.lines)
    out("room_members", text("#members"))
    out("room_lines", [li.text for li in els("#transcript > li")])
    out("room_kinds", [li.find_element(By.CSS_SELECTOR, ".kind").text
                       for li in els("#transcript > li")])
    out("script_elements_in_main", len(els("main script")))
    out("img_elements_room", len(els("img")))
    out("no_alert_room", no_alert())
    out("aria_live", el("#transcript").get_attribute("aria-live"))
    shot("room.png")
    out("js_errors", js_errors())


def goal_done(state):
    return lambda: state in text("#goal-state-now")


def scenario_goals():
    """auth on: a goal launched through the form and watched live to its
    conclusion; a person's message and a cancel on a second one"""
    console()
    signin(ARGS.token)
    wait("signed in", lambda: "#/goals" in DRIVER.current_url)
    go("#/launch")
    wait("the launch form", lambda: els("#launch-goal"))
    fill("#launch-goal", ARGS.goal)
    fill("#launch-turns", "12")
    el("#launch-submit").click()
    wait("the goal view", lambda: "#/goals/" in DRIVER.current_url and els("#goal-state-now"))
    gid = DRIVER.current_url.rsplit("/", 1)[1]
    out("gid", gid)
    out("first_state", text("#goal-state-now"))
    wait("the goal concludes in the page", goal_done("concluded"), 60)
    wait("the conclusion's envelope in the timeline",
         lambda: any(k.text == "conclusion" for k in els("#timeline .kind")), 15)
    out("states", [e.text for e in els("#timeline .state-line .state")])
    out("kinds", [e.text for e in els("#timeline .kind")])
    out("senders", [e.text for e in els("#timeline .sender")])
    out("timeline_ids", [e.get_attribute("data-id") for e in els("#timeline > li")])
    out("tasks", [e.text for e in els("#tasks .task")])
    out("conclusion", text("#conclusion"))
    out("tokens", text("#goal-tokens"))
    out("send_disabled_after", not el("#say-send").is_enabled())
    DRIVER.execute_script("window.scrollTo(0, 0)")
    shot("goal.png")
    DRIVER.set_window_size(1280, 1000)
    DRIVER.execute_script("window.scrollTo(0, 0)")
    shot("goal-top.png", whole=False)
    DRIVER.set_window_size(1280, 900)

    # the second goal: a person speaks, then cancels it
    go("#/launch")
    wait("the launch form", lambda: els("#launch-goal"))
    fill("#launch-goal", ARGS.goal2)
    el("#launch-submit").click()
    wait("the second goal's view",
         lambda: "#/goals/" in DRIVER.current_url and gid not in DRIVER.current_url
         and els("#goal-state-now"))
    gid2 = DRIVER.current_url.rsplit("/", 1)[1]
    out("gid2", gid2)
    wait("the task is under way", lambda: any(
        k.text in ("progress", "pause") for k in els("#timeline .kind")), 30)
    fill("#say-text", ARGS.say)
    el("#say-send").click()
    out("say_message", wait("the message is acknowledged", lambda: text("#say-message")))
    el("#cancel").click()
    wait("the confirmation", lambda: el("#cancel-confirm").is_displayed())
    out("confirm_text", text("#cancel-confirm"))
    el("#cancel-yes").click()
    # the notice is read from the DOM, not as shown: when the goal's
    # "cancelled" comes through the feed before the POST's answer (a
    # loaded machine), the page hides the actions, notice and all, to show
    # the outcome, and a hidden element's shown text is ""
    out("cancel_message", wait("the cancel is acknowledged", lambda: (
        el("#cancel-message").get_attribute("textContent").strip()
        or text("#cancel-confirm .notice"))))
    wait("the goal is cancelled in the page", goal_done("cancelled"), 30)
    out("states2", [e.text for e in els("#timeline .state-line .state")])
    out("cancel_disabled_after", not el("#cancel").is_enabled())

    go("#/goals")
    wait("the goal list", lambda: els("#goal-list li") or els("#goals-out .notice"))
    out("goal_list", [li.text for li in els("#goal-list > li")]
        or [li.text for li in els("#goals-out ul.plain li")])
    shot("goals.png")
    out("js_errors", js_errors())


def post(cid, sender, content, typ=None):
    body = {"comm_id": cid, "content": content, "next_speaker": ""}
    if typ is not None:
        body["type"] = typ
    return hub("POST", f"/agents/{sender}/messages", body)["id"]


def shown_ids():
    return [li.get_attribute("data-id") for li in els("#transcript > li")]


def scenario_room():
    """open mode: no sign-in; a room's transcript live, across reloads,
    with nothing lost or doubled; every view at phone width"""
    console("#/rooms")
    wait("the room list", lambda: els("#room-list li"))
    out("who_open", text("#who"))
    out("signout_hidden", not el("#signout").is_displayed())
    go(f"#/rooms/{ARGS.cid}")
    wait("the first lines", lambda: len(shown_ids()) >= ARGS.lines)
    posted = []
    for i in range(3):
        posted.append(post(ARGS.cid, "Ann", f"live {i + 1}", 4))
    wait("the live lines", lambda: len(shown_ids()) >= ARGS.lines + 3)
    out("feed_status", text(".feed-status"))

    # a reload in the middle of traffic, twice: what was posted while the
    # page was away arrives once
    for r in range(2):
        posted.append(post(ARGS.cid, "Ben", f"before reload {r + 1}", 8))
        console(reload=True)
        posted.append(post(ARGS.cid, "Ben", f"after reload {r + 1}", 7))
        want = ARGS.lines + len(posted)
        wait(f"reload {r + 1}: every line", lambda: len(shown_ids()) >= want)
    time.sleep(0.5)            # anything doubled would have arrived by now
    out("posted", posted)
    out("shown_ids", shown_ids())
    out("last_kept", DRIVER.execute_script(
        "return JSON.parse(sessionStorage.getItem(arguments[0]) || 'null')",
        f"ioa.feed.room.{ARGS.cid}")["last"])
    shot("room-open.png")

    # phone width: nothing wider than the screen, on every view
    DRIVER.set_window_size(390, 844)
    overflow = {}
    for view in ("#/agents", "#/rooms", f"#/rooms/{ARGS.cid}", "#/goals",
                 "#/launch"):
        go(view)
        time.sleep(0.1)
        wait(f"{view} at phone width", lambda: "Loading" not in text("main"))
        time.sleep(0.3)
        overflow[view] = DRIVER.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        name = "phone-" + (view.strip("#/").split("/")[0] or "home") + \
               ("-view" if view.count("/") > 1 else "") + ".png"
        shot(name)
    out("overflow", overflow)
    out("viewport", DRIVER.execute_script("return window.innerWidth"))
    out("js_errors", js_errors())


def scenario_restart():
    """a room's transcript while the hub behind the page stops and starts
    again: the test restarts it between the files --sync/ready and
    --sync/go (go holds the number of lines to expect); every line once"""
    console(f"#/rooms/{ARGS.cid}")
    wait("the first lines", lambda: len(shown_ids()) >= ARGS.lines)
    with open(os.path.join(ARGS.sync, "ready"), "w") as f:
        f.write("ready\n")
    go_file = os.path.join(ARGS.sync, "go")
    want = int(wait("the test's go", lambda: os.path.exists(go_file)
                    and open(go_file).read().strip(), 120))
    wait(f"{want} lines after the restart", lambda: len(shown_ids()) >= want,
         60)
    time.sleep(0.5)            # anything doubled would have arrived by now
    out("shown_ids", shown_ids())
    out("feed_status", text(".feed-status"))
    shot("room-after-restart.png")


def scenario_static():
    """the page loads under its CSP with no console error"""
    console()
    out("title", DRIVER.title)
    out("js_errors", js_errors())


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--url", required=True)
    p.add_argument("--shots", required=True)
    for opt in ("token", "bad", "noscope", "cid", "goal", "goal2", "say",
                "query"):
        p.add_argument("--" + opt)
    p.add_argument("--lines", type=int, default=0)
    p.add_argument("--sync", help="a directory shared with the test")
    ARGS = p.parse_args()
    os.makedirs(ARGS.shots, exist_ok=True)
    fn = globals().get("scenario_" + ARGS.scenario)
    if not fn:
        print(f"console-drive: unknown scenario {ARGS.scenario}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rc = 0
    try:
        start_browser()
        fn()
        out("done", True)
    except Timeout as e:
        out("timeout", str(e))
        try:
            shot("timeout-" + ARGS.scenario + ".png")
            out("page_text", text("body"))
            out("js_errors", js_errors())
        except Exception:
            pass
        rc = 1
    finally:
        stop_browser()
    return rc


if __name__ == "__main__":
    sys.exit(main())
