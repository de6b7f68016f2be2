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

from autoresearchd.manifest import EnvManifest

from . import interp
from . import sandbox as sandboxes
from .protocol import Shell

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
