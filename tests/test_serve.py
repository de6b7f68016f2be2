"""`autoresearchd serve`: the live dashboard as a real subprocess over a real research repo, driven by
headless Chromium through Selenium (JS console errors fail the test), plus its HTTP security."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest

from autoresearchd import defaults
from autoresearchd.config import load_config
from autoresearchd.store.notes import Note, Status, Trial, format_note
from autoresearchd.store.refs import NOTES_REF
from autoresearchd.views.summary import leaderboard, summary

from dashserver import Server, add_idea, chromium, ok_note
from popbuilder import BASELINE_VALUES, TRAIN, build_population, write_cfg

HOSTILE = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2"> RMSNorm & <b>bold</b>'
SECRET = "sk-ant-test-DO-NOT-SERVE-0123456789"
TOKEN = "t0ken-for-the-dashboard-tests"
BMEAN = sum(BASELINE_VALUES) / 3


def fetch(url, headers=None, method="GET"):
    req = urllib.request.Request(url, headers=headers or {}, method=method)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("dash")
    repo = build_population(d / "research", 60, seed=3)
    cfg = write_cfg(d, repo.path, extra="[daemon]\nmax_gpu_hours = 0.08\n")   # a budget under 0.1
    # a person's push with a hostile title, measured, whose log carries a secret that leaked somehow
    hostile = add_idea(repo, HOSTILE, f"Body with </pre><script>window.__xss=3</script> too.",
                       {"train.py": TRAIN.replace("width = 256", "width = 320").encode()},
                       note=ok_note(BMEAN - 0.01, BMEAN, "within_noise"),
                       log=f"step 1\nkey={SECRET}\n<script>window.__xss=4</script>\n".encode())
    # a queued idea the live test gives a result to
    queued = add_idea(repo, "Queued idea that lands live", "It will be measured during the test.",
                      {"train.py": TRAIN.replace("lr = 0.001", "lr = 0.0042").encode()})
    srv = Server(cfg, env={"ANTHROPIC_API_KEY": SECRET})
    try:
        yield {"cfg": cfg, "repo": repo, "srv": srv, "hostile": hostile, "queued": queued}
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def browser():
    drv = chromium()
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture
def page(browser, site):
    """The browser on the dashboard; after the test, any JS console error fails it."""
    browser.get_log("browser")
    yield browser
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"JS console errors: {errors}"


def wait(drv, cond, timeout=20.0, what="condition"):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(drv, timeout, poll_frequency=0.05).until(lambda d: cond(d), message=what)


def rows(drv):
    return drv.execute_script(
        "return [...document.querySelectorAll('#leaderboard tbody tr')].map(r => "
        "[r.dataset.idea, r.children[2].querySelector('a').textContent, r.children[3].textContent, "
        "r.children[6].textContent])")


def test_leaderboard_shows_the_repos_notes_and_escapes_titles(page, site):
    page.get(site["srv"].url + "/#/ideas")
    got = wait(page, lambda d: rows(d) or None, what="leaderboard rows")
    expect = leaderboard(load_config(site["cfg"]))
    assert len(expect) == 62
    assert [r[0] for r in got] == [r["idea"] for r in expect[:len(got)]]      # same ideas, same order
    assert len(got) == min(62, defaults.SERVE_PAGE_ROWS)
    top = expect[0]
    assert got[0][1] == top["title"] and got[0][2].startswith(f"{top['value']:.4f}")
    assert got[0][3] == "succeeded"
    # the hostile title is shown as text, and none of its scripts ran
    hostile = [r for r in got if r[1] == HOSTILE]
    assert hostile, "the idea with an HTML title is listed under its literal title"
    assert page.execute_script("return window.__xss === undefined")
    assert page.execute_script("return document.querySelectorAll('#main script, #main img').length") == 0
    # filter by status and sort by a column, through the page's own controls
    from selenium.webdriver.support.ui import Select
    Select(page.find_element("css selector", "select[name=status]")).select_by_value("queued")
    wait(page, lambda d: (r := rows(d)) and all(x[3] == "queued" for x in r), what="status filter")
    assert any(x[1] == "Queued idea that lands live" for x in rows(page))
    page.get(site["srv"].url + "/#/ideas?sort=epoch&desc=1")
    wait(page, lambda d: d.execute_script("const t = document.querySelector('th[data-sort=epoch]'); "
                                          "return t && t.textContent.includes('▾')"), what="sorted")
    epochs = page.execute_script("return [...document.querySelectorAll('#leaderboard tbody tr')]"
                                 ".map(r => +r.children[8].textContent)")
    assert epochs == sorted(epochs, reverse=True) and epochs[0] > epochs[-1]


def test_a_new_note_appears_live_without_reload(page, site):
    page.get(site["srv"].url + "/#/ideas")
    wait(page, lambda d: any(r[1] == "Queued idea that lands live" and r[3] == "queued" for r in rows(d)),
         what="queued idea listed")
    page.execute_script("window.__still_here = 1")
    wait(page, lambda d: "live" in d.find_element("id", "live").text, what="event stream connected")
    note = ok_note(2.5, BMEAN, "promoted", [2.5, 2.501, 2.499])
    t0 = time.monotonic()
    site["repo"].note_write(NOTES_REF, site["queued"], format_note(note))
    wait(page, lambda d: (r := rows(d)) and r[0][1] == "Queued idea that lands live" and r[0][3] == "succeeded",
         timeout=15, what="the new note shown live")
    took = time.monotonic() - t0
    print(f"new note visible in the browser after {took:.2f}s")
    assert page.execute_script("return window.__still_here") == 1, "the page reloaded"
    assert took < 10     # 2 s is the target (one 1 s poll + a fetch); a loaded CI machine gets slack


def test_idea_page_shows_diff_seeds_attempts_and_git_command(page, site):
    cfg = load_config(site["cfg"])
    best = next(r for r in leaderboard(cfg) if r["title"] == "Best confirmed idea")
    page.get(site["srv"].url + "/#/idea/" + best["idea"])
    wait(page, lambda d: d.find_elements("css selector", "pre.diff"), what="diff")
    adds = page.execute_script("return [...document.querySelectorAll('pre.diff .add')].map(e => e.textContent)")
    dels = page.execute_script("return [...document.querySelectorAll('pre.diff .del')].map(e => e.textContent)")
    assert any(a.startswith("+lr = 0.00") for a in adds) and any(x.startswith("-lr = 0.001") for x in dels)
    assert len(page.find_elements("css selector", "#seeds tr")) == 1 + 3
    assert best["branch"] in page.find_element("id", "git-cmd").text
    body = page.execute_script("return document.querySelector('main').textContent")
    assert "Implementer attempts (2)" in body and "patch does not apply" in body and "Log " in body
    assert "confirmed" in body
    # the hostile idea's page: text, body and log are shown as text; the leaked secret is not served
    page.get(site["srv"].url + "/#/idea/" + site["hostile"][:12])
    wait(page, lambda d: d.execute_script("const t = document.querySelector('.idea h2'); "
                                          "return t && t.textContent.includes('RMSNorm')"), what="hostile idea page")
    assert page.find_element("css selector", ".idea h2").text.strip() == HOSTILE
    assert page.execute_script("return window.__xss === undefined")
    text = page.execute_script("return document.querySelector('main').textContent")
    assert SECRET not in text and "[redacted]" in text


def test_overview_lineage_and_failures_views(page, site):
    page.get(site["srv"].url + "/#/")
    wait(page, lambda d: len(d.find_elements("css selector", ".chart canvas")) >= 2, what="charts")
    body = page.execute_script("return document.querySelector('main').textContent")
    s = summary(load_config(site["cfg"]))
    best = s["best"]       # what `status` says is what the page says
    assert best["title"] in body and f"{best['value']:.4f}" in body and "not running" in body
    # the compute spent, in the unit and to the digits `status` prints (it once read 0.0 beside 0.04)
    unit, hours = ("GPU-hours", s["spend"]["gpu_hours"]) if s["gpus"] else ("CPU-hours", s["spend"]["cpu_hours"])
    assert f"{unit}{hours:.2f}" in body.replace(" ", ""), (unit, hours)
    # beside it the budget as set, in the env's own unit (it once read "0" for 0.08, or nothing on CPU)
    assert f"{unit}{hours:.2f}/0.08" in body.replace(" ", ""), (unit, hours)
    assert f"{BMEAN:.4f}" in body and "s0 3.3000" in body            # baseline with its per-seed values
    page.get(site["srv"].url + "/#/lineage")
    wait(page, lambda d: len(d.find_elements("css selector", "li.node")) > 5, what="lineage")
    closed = [b for b in page.find_elements("css selector", "button.tog") if b.text == "▸"]
    assert closed, "some subtree starts collapsed"
    n0 = len(page.find_elements("css selector", "li.node"))
    closed[0].click()
    wait(page, lambda d: len(d.find_elements("css selector", "li.node")) > n0, what="expand a subtree")
    focus = page.find_elements("css selector", "a.focus")[0]
    focus.click()
    wait(page, lambda d: d.find_elements("css selector", ".crumbs b"), what="focused subtree")
    page.get(site["srv"].url + "/#/failures")
    wait(page, lambda d: d.find_elements("css selector", "section.card.wide"), what="failure groups")
    heads = page.execute_script("return [...document.querySelectorAll('section.card.wide h3')].map(h => h.textContent)")
    assert any(h.startswith("crashed") for h in heads) and any(h.startswith("implementation failed") or
                                                                h.startswith("check failed") for h in heads)


def test_the_baseline_has_an_idea_page_and_every_idea_link_resolves(page, site):
    """The overview and the lineage link the baseline: its page shows its commit, per-seed values and
    checkout command; no idea link on those views leads to a 404."""
    base = site["srv"].url
    repo = site["repo"]
    links = set()
    for view, ready in (("#/", ".chart canvas"), ("#/lineage", "li.node")):
        page.get(base + "/" + view)
        wait(page, lambda d: d.find_elements("css selector", ready), what=view)
        links |= set(page.execute_script("return [...document.querySelectorAll('main a[href^=\"#/idea/\"]')]"
                                         ".map(a => decodeURIComponent(a.getAttribute('href').slice(7)))"))
    assert "baseline" in links and len(links) > 5
    for ref in links:
        assert fetch(base + "/api/idea/" + urllib.request.quote(ref, safe=""))[0] == 200, ref
    page.get(base + "/#/")
    wait(page, lambda d: d.find_elements("css selector", ".chart canvas"), what="overview")
    page.find_element("css selector", 'main a[href="#/idea/baseline"]').click()
    wait(page, lambda d: d.execute_script("const t = document.querySelector('.idea h2'); "
                                          "return t && t.textContent.includes('baseline')"), what="baseline page")
    commit = repo.rev_parse("refs/heads/main")
    assert commit in page.find_element("id", "git-cmd").text and "main" in page.find_element("id", "git-cmd").text
    seeds = page.execute_script("return [...document.querySelectorAll('#seeds tr')].slice(1)"
                                ".map(r => r.children[2].textContent)")
    assert seeds == [f"{v:.4f}" for v in BASELINE_VALUES]
    assert f"{commit}" in page.execute_script("return document.querySelector('main').textContent")


def test_read_only_host_check_and_no_secret_in_api(site):
    url = site["srv"].url
    assert fetch(url + "/api/overview", method="POST")[0] == 405
    assert fetch(url + "/api/overview", {"Host": "attacker.example"})[0] == 403
    code, headers, body = fetch(url + "/")
    assert code == 200 and "script-src 'self'" in headers["content-security-policy"]
    for path in ("/api/overview", "/api/ideas?limit=1000", "/api/failures", "/api/lineage?depth=6",
                 f"/api/idea/{site['hostile']}"):
        code, _, body = fetch(url + path)
        assert code == 200 and SECRET not in body, path
    assert "[redacted]" in fetch(url + f"/api/idea/{site['hostile']}")[2]
    assert fetch(url + "/api/ideas?status=bogus")[0] == 400


def test_other_binds_need_a_token(tmp_path, site):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(site["cfg"]), "serve",
                        "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "without a token" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "tok").write_text(TOKEN + "\n")
    srv = Server(site["cfg"], "--host", "0.0.0.0", "--token-file", str(tmp_path / "tok"))
    try:
        url = srv.url.replace("0.0.0.0", "127.0.0.1")
        assert fetch(url + "/api/overview")[0] == 401
        assert fetch(url + "/api/overview", {"Authorization": "Bearer wrong-token-wrong-token"})[0] == 401
        code, _, body = fetch(url + "/api/overview", {"Authorization": f"Bearer {TOKEN}"})
        assert code == 200 and json.loads(body)["total"] == 62
        code, headers, _ = fetch(url + f"/?token={TOKEN}")
        assert code == 303 and headers["location"] == "/" and "HttpOnly" in headers["set-cookie"]
        cookie = re.match(r"[^;]+", headers["set-cookie"]).group(0)
        assert fetch(url + "/api/ideas", {"Cookie": cookie})[0] == 200
    finally:
        srv.stop()


def test_snapshot_views_at_a_few_hundred_ideas(tmp_path):
    """The views' data without a browser: lineage bounded per level, failures grouped, curves cut to steps."""
    from autoresearchd.views.dashboard import Snapshot, steps
    from autoresearchd.views.summary import load
    repo = build_population(tmp_path / "research", 300, seed=5)
    cfg = load_config(write_cfg(tmp_path, repo.path))
    research, pop = load(cfg)
    # a suspicious result filed by a newer daemon as its own key still lands in its group
    first = next(i for i in pop.ideas if i.value is not None)
    n = Note(status=Status.SUCCEEDED, metric="val_loss", value=3.0, values=[3.0], decision="promoted",
             trials=[Trial(trial_id="x", seed=0, status=Status.SUCCEEDED, value=3.0)])
    repo.note_write(NOTES_REF, first.commit, format_note(n).replace("schema:", "suspicious: true\nschema:"))
    research, pop = load(cfg)
    s = Snapshot(cfg, research, pop, "1", secrets=[])
    lin = s.lineage(limit=5)
    root = lin["root"]
    assert root["id"] == "baseline" and root["size"] == 301 and len(root["kids"]) == 5
    assert root["more"] == root["children"] - 5 > 0
    bests = [k["best"] for k in root["kids"] if k["best"] is not None]
    assert bests == sorted(bests)                      # goal min: the paying subtrees first
    child = next(k for k in root["kids"] if k["children"])
    sub = s.lineage(child["id"], depth=1)
    assert sub["ancestors"][0]["id"] == "baseline" and len(sub["root"]["kids"]) == child["children"]
    assert s.lineage("no-such-idea") is None
    groups = {g["reason"]: g["count"] for g in s.failures()["groups"]}
    assert groups.get("tamper_or_suspicious") == 1
    assert {"crashed", "duplicate", "timed_out"} <= set(groups)
    assert sum(groups.values()) == sum(1 for r in s.reasons.values() if r)
    page = s.ideas(status="succeeded", sort="value", desc=True, limit=10)
    vals = [r["value"] for r in page["rows"]]
    assert len(vals) == 10 and vals == sorted(vals, reverse=True)
    assert page["matched"] == page["facets"]["status"]["succeeded"]
    curve = s.overview()["curves"]["by_time"]
    assert len(curve["raw"]) < 100 and curve["raw"][-1] == steps(curve)["raw"][-1]
