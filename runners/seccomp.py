"""The seccomp filter every bwrap sandbox gets: the kernel's key retention service (add_key,
request_key, keyctl) answers ENOSYS inside, as on a kernel built without it; every other call is
allowed.

Why (docs/security.md, "Kernel state the namespaces do not cover"): keyrings belong to no namespace
that bwrap makes. A sandboxed process possesses the session keyring it inherits (the daemon's, under
systemd or an ssh login with pam_keyinit) and, by id from /proc/keys, may write the user's own
keyrings (`_uid.N`, `_uid_ses.N`, perm user=all). So a key planted by one step outlives it: a model
runner's group 0 could tell group 1 every row it saw (the causality check rests on the groups knowing
nothing of each other), a trial could leave the validation rows for the next idea, and a run could
read the daemon's keys (a Kerberos ticket in a KEYRING: cache). Nothing in a trial needs keys.

The filter is classic BPF (what bwrap's `--seccomp FD` loads), built here for every architecture a
host may be, so one prefix works on any host; the three calls are consecutive on each, so a range
check per architecture does. An architecture not in the table passes unfiltered. Numbers from
libseccomp's tables (x32 is x86_64's numbers with bit 30 set, masked off).

    LAUNCHER: a `bash -c` script that opens the filter on fd 3 and execs bwrap (its $0) with an
    empty environment; the prefix passes `--seccomp 3` (runners/sandbox.py).
"""

from __future__ import annotations

import struct

# seccomp_data: nr at offset 0, arch at 4; classic BPF opcodes
_LD_ABS, _JEQ, _JGE, _JGT, _AND, _RET = 0x20, 0x15, 0x35, 0x25, 0x54, 0x06
_ALLOW, _ENOSYS = 0x7FFF0000, 0x00050000 | 38            # SECCOMP_RET_ERRNO | ENOSYS (38 on all below)
_X32_BIT = 0x40000000

# AUDIT_ARCH_* -> add_key (request_key, keyctl follow it)
ARCHES = {
    0xC000003E: 248,   # x86_64 (and x32, masked)
    0x40000003: 286,   # i386
    0xC00000B7: 217,   # aarch64
    0xC00000F3: 217,   # riscv64
    0xC0000102: 217,   # loongarch64 (asm-generic numbers)
    0x40000028: 309,   # arm
    0xC0000015: 269,   # ppc64le
    0x80000015: 269,   # ppc64
    0x80000016: 278,   # s390x
}


def program() -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) instructions: per architecture, nr in [add_key, keyctl] -> ENOSYS."""
    blocks = []
    for arch, first in ARCHES.items():
        body = [(_LD_ABS, 0, 0, 0)]
        if arch == 0xC000003E:
            body.append((_AND, 0, 0, 0xFFFFFFFF & ~_X32_BIT))
        blocks.append((arch, body, first))
    # layout: ld arch; one jeq per arch (to its block); ret allow; the blocks; ret allow; ret enosys
    n_jeq = len(blocks)
    head = [(_LD_ABS, 0, 0, 4)]
    sizes = [len(b) + 2 for _, b, _ in blocks]          # body + jge + jgt
    start = 1 + n_jeq + 1                               # index of the first block
    total = start + sum(sizes)
    allow, deny = total, total + 1
    starts, at = [], start
    for s in sizes:
        starts.append(at)
        at += s
    for i, (arch, _, _) in enumerate(blocks):
        pc = 1 + i
        head.append((_JEQ, starts[i] - pc - 1, 0, arch))
    head.append((_RET, 0, 0, _ALLOW))
    prog = list(head)
    for (arch, body, first), at in zip(blocks, starts):
        prog += body
        pc = len(prog)                                  # the jge's index
        prog.append((_JGE, 0, allow - pc - 1, first))   # below add_key: allow
        prog.append((_JGT, allow - pc - 2, deny - pc - 2, first + 2))   # above keyctl: allow, else deny
    prog += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ENOSYS)]
    assert len(prog) == total + 2 and all(0 <= j < 256 for _, jt, jf, _ in prog for j in (jt, jf))
    return prog


def filter_bytes(big_endian: bool = False) -> bytes:
    """The filter as `struct sock_filter` array in the host's byte order."""
    fmt = ">HBBI" if big_endian else "<HBBI"
    return b"".join(struct.pack(fmt, *ins) for ins in program())


def _printf_escaped(b: bytes) -> str:
    return "".join(f"\\{c:03o}" for c in b)


# bash's $HOSTTYPE (no process): the big-endian hosts of the table get their byte order. The filter
# is written by a printf builtin in a process substitution (one fork, no exec); bwrap reads fd 3 to its end.
LAUNCHER = ("case $HOSTTYPE in s390*|powerpc64|ppc64) f='" + _printf_escaped(filter_bytes(True)) + "';; "
            "*) f='" + _printf_escaped(filter_bytes(False)) + "';; esac; "
            'exec 3< <(printf "$f") && exec -c "$0" "$@"')
