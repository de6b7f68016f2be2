"""How a trial is isolated on a host: the host is probed once for its sandbox and the Python
environment behind its PATH, then each trial gets two prefixes (runners/sandbox.py) that trial.sh
puts before `run` and before the evaluator.

run sees the system, the Python environment and the data (read-only) and its code/ (writable).
The evaluator sees the same system, its own fresh eval/ (the baseline's frozen files), the declared
artifacts and the eval-only data, read-only. Neither sees the trial directory's status files, the
other trials, the research repo or the daemon's home.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest
from autoresearchd.vocab import Level

from . import interp
from . import sandbox as sandboxes
from .protocol import Shell

ERROR, WARN, OK = Level.ERROR, Level.WARN, Level.OK      # sandbox_check's findings, as validate's

log = logging.getLogger("autoresearchd")


@dataclass
class TrialSandbox:
    """What trial.env carries: the sandbox kind and the prefixes of run and evaluate."""
    kind: str = "none"
    run_prefix: list[str] = field(default_factory=list)
    eval_prefix: list[str] = field(default_factory=list)
    eval_env: dict[str, str] = field(default_factory=dict)    # eval-only variables, host paths
    model_prefix: list[str] = field(default_factory=list)     # the model runner's (split evaluation)


@dataclass
class HostSandbox:
    sandbox: sandboxes.Sandbox
    env_dirs: list[str]          # with the resolved interpreter's directories (runners/interp.py)
    home: str
    python: interp.Python | None = None     # the interpreters trials run on this host


def probe_script(sb: sandboxes.Sandbox, path: str, python: str | None = None) -> str:
    """One round trip: the host's $HOME, whether the sandbox works there, its env dirs, and the
    interpreters trials run (`python`: the configured one, else PATH's)."""
    qpath = '"$PATH"'.join(shlex.quote(p) for p in path.split("$PATH"))
    script = (f'echo "home $HOME"; export PATH={qpath}; echo "check $({sb.check_script()})"; '
              f"({sandboxes.ENV_DIRS_SCRIPT}) 2>/dev/null | while IFS= read -r l; do printf 'dir %s\\n' \"$l\"; done\n"
              f"{interp.probe_script(python)}")
    return f"exec bash -c {shlex.quote(script)}"     # bash whatever the login shell is


def probe_host(sh: Shell, sb: sandboxes.Sandbox, path: str,
               python: str | None = None) -> tuple[str | None, list[str], str, interp.Python]:
    """(None or why the sandbox does not work, env dirs, $HOME, the interpreters) on the host
    behind `sh`."""
    rc, out, err = sh.run(probe_script(sb, path, python), timeout=120)
    lines = out.decode(errors="replace").splitlines()
    home = next((x[5:] for x in lines if x.startswith("home ")), "")
    check = next((x[6:] for x in lines if x.startswith("check ")), None)
    if rc != 0 or check is None:
        raise RuntimeError(f"probing the sandbox on {sh.name} failed: {err.decode(errors='replace')[-300:]}")
    dirs = sandboxes.prefixes([x[4:] for x in lines if x.startswith("dir ")])
    return (None if check.strip() == "ok" else check.strip()), dirs, home, interp.parse(lines, python)


def resolve(sh: Shell, host: str, kind: str, image: str, path: str, fallback: bool,
            python: str | None = None) -> HostSandbox:
    """The sandbox to use on `host`, with the interpreter trials run there resolved (runners/interp.py;
    `python`: runner.python or the host's). Where the sandbox does not work: an error, or (only for the
    config-less embedded demo, `fallback`) a one-line warning and `none`, which every note then records.
    A configured `python` that does not start is an error too."""
    sb = sandboxes.get(kind, image=image) if kind == "apptainer" else sandboxes.get(kind)
    why, dirs, home, py = probe_host(sh, sb, path, python)
    if py.error():
        raise RuntimeError(f"{host}: {py.error()} (docs/hosts.md, \"Interpreters\")")
    dirs = sandboxes.prefixes(dirs + py.binds(home))
    if why is None:
        return HostSandbox(sb, dirs, home, py)
    if fallback:
        log.warning("%s: %s. Trials run UNSANDBOXED (notes say `sandbox: none`).", host, why)
        return HostSandbox(sandboxes.get("none"), dirs, home, py)
    raise RuntimeError(f"sandbox '{kind}' does not work on {host}: {why}; "
                       f"or set runner.sandbox = \"none\" to run trials without one (docs/security.md)")


def host_path(v: str, home: str) -> str | None:
    """An absolute host path named by a data value (`/x`, `~/x`), else None."""
    if v.startswith("~/") and home:
        return home.rstrip("/") + v[1:]
    return v if v.startswith("/") else None


def trial_sandbox(hs: HostSandbox, tdir: str, m: EnvManifest, data_env: dict[str, str],
                  binds: list[str], prepared: str | None = None) -> TrialSandbox:
    """The run and evaluate prefixes for the trial directory `tdir` (`prepared`: the prepare step's
    output on this host, read-only to both)."""
    data = [p for v in data_env.values() if (p := host_path(v, hs.home))]
    eval_env = {k: (host_path(v, hs.home) or f"{tdir}/eval/{v.strip('/')}") for k, v in m.eval_data.items()}
    eval_only = [v for k, v in eval_env.items() if host_path(m.eval_data[k], hs.home)]
    ro = hs.env_dirs + list(binds) + data + ([prepared] if prepared else [])
    run = sandboxes.SandboxRequest(argv=[], cwd=f"{tdir}/code", writable=[f"{tdir}/code"], readonly=ro,
                                   network=m.network, gpus=m.gpus)
    # a split evaluation's scorer also writes the input groups and reads the outputs under io/
    ev = sandboxes.SandboxRequest(argv=[], cwd=f"{tdir}/eval", writable=[f"{tdir}/eval"] + ([f"{tdir}/io"] if m.model else []),
                                  readonly=ro + eval_only + [f"{tdir}/artifacts"], network=False, gpus=m.gpus)
    return TrialSandbox(hs.sandbox.name, hs.sandbox.prefix(run), hs.sandbox.prefix(ev), eval_env,
                        model_prefix(hs, tdir, m, ro) if m.model else [])


def model_prefix(hs: HostSandbox, tdir: str, m: EnvManifest, ro: list[str]) -> list[str]:
    """The model runner's prefix: what run may read too (the environment, the data, the prepare
    output), plus its own model/ cwd, the artifacts and the current group's inputs, all read-only;
    only io/cur/out is writable. No eval_data, no eval/, no network."""
    req = sandboxes.SandboxRequest(argv=[], cwd=f"{tdir}/model", writable=[f"{tdir}/io/cur/out"],
                                   readonly=ro + [f"{tdir}/model", f"{tdir}/artifacts", f"{tdir}/io/cur/in"],
                                   network=False, gpus=m.gpus)
    return hs.sandbox.prefix(req)


def sandbox_check(runner, host: str, manifest) -> list[tuple[str, str, str]]:
    """(level, what, hint) findings of the interpreter check on `host`: the resolved interpreters run
    inside the trial's sandbox, with the trial's PATH, must be the same ones, see every `sys.path`
    entry they see outside, import torch where they do outside, and each step's first command must
    resolve there. Levels are vocab.Level's, as validate's findings."""
    q = shlex.quote
    hs = runner.host_sandbox(host)
    py: interp.Python | None = getattr(hs, "python", None)
    if py is not None and py.error():
        return [(ERROR, f"interpreter on {host}: {py.error()}", "docs/hosts.md, \"Interpreters\"")]
    outside = py.ok if py else []
    d = f"{runner.work_root(host).rstrip('/')}/.interp-check"
    bound = hs.env_dirs + list(getattr(runner.cfg, "sandbox_binds", [])) + list(defaults.SANDBOX_SYSTEM_DIRS)
    req = sandboxes.SandboxRequest(argv=[], cwd=d, writable=[d], readonly=bound, gpus=manifest.gpus)
    words = interp.first_words(manifest.setup, manifest.run, manifest.evaluate)
    torch, seen = [], set()
    for i in outside:                  # once per interpreter (python and python3 are mostly one)
        if i.info.get("torch") and i.info.get("real") not in seen:
            torch.append(i.name)
            seen.add(i.info.get("real"))
    script = interp.inside_script([i.name for i in outside], torch, words)
    path = runner.trial_path(host)
    qp = '"$PATH"'.join(q(p) for p in path.split("$PATH"))
    # the trial's environment (trial.sh's base_env): the host variables it passes, when set
    passed = " ".join(q(v) for v in defaults.SANDBOX_PASS_ENV)
    cmd = (f"mkdir -p {q(d)} && export PATH={qp} && a=() && for v in {passed}; do "
           '[ -n "${!v+x}" ] && a+=("$v=${!v}"); done; ' + " ".join(q(a) for a in hs.sandbox.prefix(req)) +
           f' env -i PATH="$PATH" HOME={q(d)} LANG=C.UTF-8 "${{a[@]}}" bash -c {q(script)}; rc=$?; rm -rf {q(d)}; exit $rc')
    rc, out, err = runner.shell_for(host).run(f"exec bash -c {q(cmd)}", timeout=120)
    lines = out.decode(errors="replace").splitlines()
    if rc != 0:
        return [(ERROR, f"interpreter check on {host}: the sandbox exited {rc}: "
                        f"{err.decode(errors='replace').strip()[-300:] or '(no output)'}", "")]
    inside = {i.name: i for i in interp.parse(lines).found}
    res: list[tuple[str, str, str]] = []
    fix = "docs/operations.md, \"Exit 127\""
    for i in outside:
        j = inside.get(i.name)
        if j is None:
            res.append((ERROR, f"`{i.name}` is not found inside the sandbox on {host} (outside: {i.executable})", fix))
            continue
        if not j.info:
            res.append((ERROR, f"`{i.name}` inside the sandbox on {host} ({j.command}) does not start: "
                               f"{j.error.replace(chr(31), ' ').strip()[-300:]}", fix))
            continue
        if j.executable != i.executable:
            res.append((ERROR, f"`{i.name}` inside the sandbox on {host} is {j.executable}, outside {i.executable}", fix))
        # absent inside, or there only as an empty parent of narrower binds (as $HOME may be)
        seen = set(j.info.get("dirs", []))
        lost = [p for p in i.info.get("path", []) if p in i.info.get("dirs", []) and (p not in seen or not any(
                p == b or p.startswith(b.rstrip("/") + "/") for b in bound))]
        if lost:
            res.append((ERROR, f"`{i.name}` inside the sandbox on {host} cannot see {', '.join(lost)} (on its "
                               f"sys.path outside)", "add them to runner.sandbox_binds (docs/hosts.md, \"Interpreters\")"))
    for ln in lines:
        if ln.startswith("torch ") and not ln.endswith(" ok"):
            _, n, why = (ln.split(" ", 2) + [""])[:3]
            res.append((ERROR, f"`{n}` imports torch outside the sandbox on {host} but not inside: {why.strip()[-300:]}",
                        "bind what it loads from outside its env (a CUDA install under /opt, say) with "
                        "runner.sandbox_binds (docs/hosts.md, \"Interpreters\")"))
        elif ln.startswith("nocmd "):
            w = ln[6:]
            res.append((WARN if manifest.setup and w not in [i.name for i in outside] else ERROR,
                        f"`{w}` (a step's first command) is not found inside the sandbox on {host}; trials would exit 127", fix))
    if not res:
        what = "; ".join(f"{i.name} = {i.executable}" + (f" (via {i.command})" if i.shim else "") for i in outside)
        res.append((OK, f"interpreter inside the sandbox on {host}: {what or 'no python needed'}"
                        + (f"; {', '.join(words)} found" if words else ""), ""))
    return res
