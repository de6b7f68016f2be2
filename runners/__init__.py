"""Runner registry. A runner is a small class with a `name`; unknown names list the valid ones."""

from __future__ import annotations

from autoresearchd.registry import Registry

# name -> "module:Class", imported on use so the core starts fast and optional deps stay optional
_REGISTRY = Registry('runner', 'runners', {
    "local": "autoresearchd.runners.local:LocalRunner",
    "ssh": "autoresearchd.runners.ssh:SSHRunner",
    "slurm": "autoresearchd.runners.slurm:SlurmRunner",
})
names, get, register = _REGISTRY.names, _REGISTRY.get, _REGISTRY.register
