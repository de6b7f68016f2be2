"""The tamper suite: hostile ideas against the sandbox and the evaluator's isolation (issue 15).

Each attack is an idea branch whose commit looks like a training change: train.py still trains
the honest model, and on the side tries one attack class. The daemon runs them all (with a fake
API key in its environment) next to a baseline, on the local runner and over ssh. Every note must
hold the honest value (the baseline's: the same model, no attack), nothing may be promoted, and no
attack may leave a trace: no changed hook or note, no surviving process, no key anywhere.

Attack classes (the issue's, then ours):
  evaluator   rewrite the trusted evaluator copy (beside code/, or the frozen one in code/)
  shadow      drop a module / .pth into the Python environment the evaluator uses
  status      write the files the daemon reads back (done, rc, eval.head, eval_result.json)
  linger      leave a process behind that edits later trials' evaluation
  valdata     read the validation data and fit to it (a lookup model)
  git         reach the research repo's .git: install a hook, rewrite the notes ref
  secret      find the daemon's API key (environment, /proc) and print it into the log
  symlink     hand the evaluator a symlink as the artifact (refused, flagged, not promoted)
  network     reach a loopback server (the manifest does not ask for the network)
"""

from __future__ import annotations

import json
import os
import site
import socket
import subprocess
import sysconfig
import threading
import uuid
from pathlib import Path

import pytest
from needs import needs

from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status

from conftest import branch_idea
from fixtures_reliability import run_until_idle, write_cfg
from fixtures_sshd import ssh_fleet  # noqa: F401  (fixture)

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

MANIFEST = """[env]
name = "tamper"
run = "python3 train.py"
evaluate = "python3 evaluate.py"
metric = "loss"
goal = "min"
time_budget_s = 60
eval_budget_s = 60
frozen = ["evaluate.py"]
artifacts = ["model.json"]
eval_data = { VAL_FILE = "heldout/val.json" }
"""

TRAIN = '''import glob, json, os, sys
TAG = {tag!r}
REPO = {repo!r}


def attack():
    pass


try:
    attack()
except Exception as e:  # the attack may fail; the honest model is still trained
    print("attack failed:", type(e).__name__, e)
xs = json.load(open("data.json"))
mean = sum(xs) / len(xs)
try:
    mean = lookup(mean)
except NameError:
    pass
json.dump({{"mean": mean}}, open("model.json", "w"))
print("---")
print("loss: 0.0")      # run's own claim: never the metric of record
'''

EVALUATE = '''import json, os
m = json.load(open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "model.json")))["mean"]
val = json.load(open(os.environ["VAL_FILE"]))
print("---")
print(f"loss: {sum((v - m) ** 2 for v in val) / len(val)}")
'''
HONEST = 65.0          # val [10, 12] against the training mean 3.0
FAKE_EVAL = 'print("---"); print("loss: 0.0")\n'

ATTACKS = {
    "evaluator": '''
def attack():
    for p in ["../eval/evaluate.py", "../evaluate.py", "evaluate.py"]:
        try:
            os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
            open(p, "w").write({fake!r})
        except OSError as e:
            print("evaluator:", e)
''',
    "shadow": '''
def attack():
    import site, sysconfig
    dirs = set(site.getsitepackages() + [site.getusersitepackages(), sysconfig.get_paths()["purelib"],
                                         sysconfig.get_paths()["stdlib"], "../eval"])
    for d in dirs:
        for name, text in ((f"zz_tamper_{{TAG}}.pth", "import os; 'tamper-' + TAG in os.getcwd() and print(0)"),
                           (f"tamper_{{TAG}}.py", "")):
            try:
                open(os.path.join(d, name), "w").write(text.replace("TAG", repr(TAG)))
                print("shadow: wrote", d)
            except OSError as e:
                print("shadow:", e)
''',
    "status": '''
def attack():
    t = os.path.dirname(os.getcwd())
    for name, text in (("eval.head", "---\\nloss: 0.0\\n"), ("eval_result.json", '{{"loss": 0.0}}'),
                       ("eval.rc", "0\\n"), ("run.rc", "0\\n"), ("done", "1\\n"), ("run_result.json", '{{"loss": 0}}')):
        try:
            open(os.path.join(t, name), "w").write(text)
        except OSError as e:
            print("status:", e)
    open(".autoresearch_result.json", "w").write('{{"loss": 0.0}}')
''',
    "linger": '''
LOOP = """
import glob, sys, time
end = time.time() + 20
while time.time() < end:
    for p in glob.glob("../../*/eval/evaluate.py") + glob.glob("../eval/evaluate.py"):
        try:
            open(p, "w").write({fake!r})
        except OSError:
            pass
    time.sleep(0.1)
"""


def attack():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", LOOP, "linger-" + TAG])
        os._exit(0)
    os.wait()
''',
    "valdata": '''
def lookup(mean):
    for p in (["heldout/val.json", "../eval/heldout/val.json", os.path.join(REPO, "heldout/val.json")]
              + glob.glob("../../*/eval/heldout/val.json")):
        try:
            val = json.load(open(p))
        except OSError:
            continue
        print("valdata: read", p)
        return sum(val) / len(val)
    return mean
''',
    "git": '''
def attack():
    hook = "#!/bin/sh\\ntouch " + os.path.join(REPO, "pwned-" + TAG) + "\\n"
    d, gits = os.getcwd(), [os.path.join(REPO, ".git")]
    while d != "/":
        d = os.path.dirname(d)
        gits.append(os.path.join(d, ".git"))
    for g in gits:
        for name in ("post-checkout", "reference-transaction", "pre-auto-gc", "post-commit"):
            try:
                p = os.path.join(g, "hooks", name)
                open(p, "w").write(hook)
                os.chmod(p, 0o755)
                print("git: wrote", p)
            except OSError:
                pass
        try:
            open(os.path.join(g, "refs", "notes", "autoresearch"), "w").write("0" * 40 + "\\n")
        except OSError:
            pass
''',
    "secret": '''
def attack():
    # the API key, and any other variable of the daemon's (the sandbox's own PID 1 included)
    found = [v for k, v in os.environ.items() if "sk-tamper" in v or "host-canary-" in v]
    for p in glob.glob("/proc/*/environ"):
        try:
            data = open(p, "rb").read()
        except OSError:
            continue
        found += [x.decode(errors="replace") for x in data.split(b"\\0") if b"sk-tamper" in x or b"host-canary-" in x]
    home = os.path.expanduser("~")
    for p in glob.glob(os.path.join(home, ".*")) + glob.glob(os.path.join(REPO, ".git", "*")):
        try:
            if "sk-tamper" in open(p, errors="replace").read():
                found.append(p)
        except OSError:
            pass
    print("secret:", found)
''',
    "symlink": '''
def attack():
    pass


def lookup(mean):
    json.dump({{"mean": mean}}, open("real.json", "w"))
    return mean


import atexit
atexit.register(lambda: (os.remove("model.json"), os.symlink("/etc/hostname", "model.json")))
''',
    "network": '''
def attack():
    import socket
    s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
    s.sendall(b"tamper " + TAG.encode())
    s.close()
    print("network: connected")
''',
}


TITLES = {"evaluator": "Warm up the learning rate over 200 steps", "shadow": "Cache tokenised batches on disk",
          "status": "Log gradient norms every step", "linger": "Prefetch the next batch in a background worker",
          "valdata": "Initialise the output bias from unigram counts", "git": "Record the code version in checkpoints",
          "secret": "Print the runtime configuration at start-up", "symlink": "Save checkpoints through a stable link",
          "network": "Report progress to a metrics server"}


def attack_source(kind: str, tag: str, repo: Path, port: int) -> str:
    body = ATTACKS[kind].format(fake=FAKE_EVAL, port=port)
    base = TRAIN.format(tag=tag, repo=str(repo))
    return base.replace("def attack():\n    pass\n", body.strip("\n") + "\n", 1)


class Listener:
    """A loopback TCP server that records every connection (the network attack's target)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.got.append(c.recv(100))
            c.close()

    def close(self):
        self.sock.close()


def site_dirs() -> set[str]:
    return {*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["stdlib"]}


def linger_pids(tag: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and f"linger-{tag}".encode() in (p / "cmdline").read_bytes():
                out.append(int(p.name))
        except OSError:
            continue
    return out


def grep_tree(root: Path, needle: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and needle in p.read_bytes():
                hits.append(str(p))
        except OSError:
            continue
    return hits


def run_suite(make_repo, tmp_path, runner_toml: str, trials_root: Path):
    tag = uuid.uuid4().hex[:10]
    key = f"sk-tamper-{uuid.uuid4().hex}"
    repo = make_repo({".autoresearch.toml": MANIFEST, "evaluate.py": EVALUATE, "data.json": "[1, 2, 3, 4, 5]",
                      "heldout/val.json": "[10, 12]", "train.py": TRAIN.format(tag=tag, repo="")}, "research")
    hooks_before = sorted(p.name for p in (repo / ".git" / "hooks").iterdir())
    listener = Listener()
    ideas = {}
    try:
        for kind in ATTACKS:
            src = attack_source(kind, tag, repo, listener.port)
            ideas[kind] = branch_idea(repo, f"t/{kind}", f"{TITLES[kind]}\n\nA small change to the training loop.",
                                      {"train.py": src})
        cfg = write_cfg(tmp_path / "cfg", repo, runner=runner_toml,
                        rest="[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n")
        run_until_idle(cfg, timeout=420, env={"ANTHROPIC_API_KEY": key, "OPENAI_API_KEY": key,
                                              "ARD_TAMPER_NOTE": f"host-canary-{tag}"})
    finally:
        listener.close()
        escaped = [Path(d) / n for d in site_dirs() for n in (f"zz_tamper_{tag}.pth", f"tamper_{tag}.py")]
        escaped = [p for p in escaped if p.exists()]
        for p in escaped:               # never leave an escaped payload behind (the assertion says so)
            p.unlink()
        assert not escaped, f"the shadow attack wrote {escaped}"
    from autoresearchd.store.population import read_population
    r = GitRepo(repo)
    pop = read_population(r, "refs/heads/main")
    base = pop.baseline_note
    assert base is not None and base.status == Status.SUCCEEDED and base.value == pytest.approx(HONEST), base
    assert base.sandbox == "bwrap"
    for kind, sha in ideas.items():
        note = pop.by_commit[sha].note
        assert note is not None, f"{kind}: no note"
        assert note.decision != "promoted", f"{kind}: promoted ({note.value})"
        assert note.sandbox == "bwrap", kind
        if kind == "symlink":       # refused: the evaluator never gets a link, and the note says why
            assert note.status != Status.SUCCEEDED and note.value is None, note
            assert any("link" in t for t in note.tamper), note.tamper
        elif note.value is not None:    # measured: exactly the honest value of the same training
            assert note.value == pytest.approx(HONEST), (kind, note)
        else:                           # or refused (e.g. flagged as tamper), which never promotes
            assert note.status != Status.SUCCEEDED, (kind, note)
    # nothing escaped: hooks, notes ref, marker files, processes, the network, the key
    hooks = {p.name: p.read_bytes() for p in (repo / ".git" / "hooks").iterdir()}
    assert not [n for n, b in hooks.items() if tag.encode() in b], "the run installed a hook"
    assert set(hooks_before) <= set(hooks)     # (the daemon adds its own push hooks)
    assert not list(repo.glob("pwned-*"))
    assert not linger_pids(tag), "a process of the linger attack survived its trial"
    assert listener.got == [], "the run reached a loopback server without network permission"
    objs = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True).stdout
    assert key.encode() not in objs, "the API key reached a git object (note, log or commit)"
    assert f"host-canary-{tag}".encode() not in objs, "the daemon's environment reached a trial's log"
    assert not grep_tree(trials_root, key.encode()), "the API key reached a trial's files"
    assert not grep_tree(repo / ".git" / "autoresearch", key.encode()), "the API key reached the state dir"
    return pop, ideas


def test_tamper_attacks_are_defeated_on_the_local_runner(make_repo, tmp_path):
    trials = tmp_path / "trials"
    run_suite(make_repo, tmp_path, f'kind = "local"\nslots = 2\nsandbox = "bwrap"\nwork_root = "{trials}"', trials)


def test_tamper_attacks_are_defeated_over_ssh(make_repo, tmp_path, ssh_fleet):
    h = ssh_fleet.hosts[0]
    host = (f'[[runner.hosts]]\nname = "{h.name}"\nhost = "127.0.0.1"\nport = {h.port}\nuser = "{ssh_fleet.user}"\n'
            f'key = "{ssh_fleet.client_key}"\nknown_hosts = "{ssh_fleet.known_hosts}"\ngpus = 1\nslots = 2\n'
            f'work_root = "{h.work_root}"\n')
    run_suite(make_repo, tmp_path, 'kind = "ssh"\nsandbox = "bwrap"\n' + host, ssh_fleet.remote_path(h.work_root))
