#!/usr/bin/env python3
"""Every program given answers --version with the project's version, --help with its
options, and rejects an unknown option with exit status 2 and a message naming it.

usage: check_cli.py VERSION PROGRAM...
"""
import os
import subprocess
import sys


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def main():
    version, programs = sys.argv[1], sys.argv[2:]
    failures = []
    for prog in programs:
        name = os.path.basename(prog)
        before = len(failures)
        r = run([prog, "--version"])
        if r.returncode != 0 or version not in r.stdout:
            failures.append(f"{name} --version: exit {r.returncode}, stdout {r.stdout!r}, want {version!r}")
        r = run([prog, "--help"])
        if r.returncode != 0 or "--version" not in r.stdout:
            failures.append(f"{name} --help: exit {r.returncode}, no --version in {r.stdout[:200]!r}")
        r = run([prog, "--no-such-option"])
        if r.returncode != 2 or "--no-such-option" not in r.stderr:
            failures.append(f"{name} --no-such-option: exit {r.returncode} (want 2), stderr {r.stderr!r}")
        print(f"{name}: {'ok' if len(failures) == before else 'FAILED'}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(programs)} program(s), {len(failures)} failure(s)")
    return 1 if failures or not programs else 0


if __name__ == "__main__":
    sys.exit(main())
