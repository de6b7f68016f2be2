"""A person pushes an idea branch over SSH (real sshd on loopback) and fetches the result note back."""

import os
import pwd
import shutil
import tempfile
from pathlib import Path

from autoresearchd.store.notes import Status

from conftest import git, run_until_settled, write_config
from fixtures_sshd import ssh_fleet  # noqa: F401


def test_push_over_ssh_and_fetch_notes(ssh_fleet, toy_env, tmp_path, monkeypatch):  # noqa: F811
    fleet = ssh_fleet
    shared = Path(tempfile.mkdtemp(prefix="ard-push-"))
    shared.chmod(0o755)
    repo = shared / "research"
    shutil.copytree(toy_env, repo)
    git(repo, "config", "core.sharedRepository", "0777")    # daemon (root) and pusher share objects
    for p in [repo, *repo.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o666)
    if os.geteuid() == 0 and fleet.user != "root":
        # git refuses repos owned by someone else; both sides are told this one is fine
        for k, v in {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}.items():
            monkeypatch.setenv(k, v)
        gc = fleet.home / ".gitconfig"
        gc.write_text("[safe]\n\tdirectory = *\n")
        pw = pwd.getpwnam(fleet.user)
        os.chown(gc, pw.pw_uid, pw.pw_gid)
    port = fleet.hosts[0].port
    monkeypatch.setenv("GIT_SSH_COMMAND", f"ssh -i {fleet.client_key} -o BatchMode=yes -o IdentitiesOnly=yes "
                                          f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={fleet.known_hosts}")
    url = f"ssh://{fleet.user}@127.0.0.1:{port}{repo}"
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", url, str(cl))
    run = cl / "run.py"
    run.write_text(run.read_text().replace("x = 1.0", "x = 0.3"))
    git(cl, "commit", "-qam", "Much lower x\n\nPushed over ssh.")
    git(cl, "push", "-q", "origin", "HEAD:refs/heads/idea/dave/ssh")
    sha = git(cl, "rev-parse", "HEAD").strip()
    pop = run_until_settled(write_config(tmp_path, repo))
    note = pop.by_commit[sha].note
    assert note.status == Status.SUCCEEDED and 0.3 <= note.value < 0.32
    assert pop.by_commit[sha].origin == "human"
    git(cl, "fetch", "-q", "origin", "refs/notes/*:refs/notes/*")
    assert "succeeded score=0.3" in git(cl, "log", "--notes=autoresearch", "-1")
    shutil.rmtree(shared, ignore_errors=True)
