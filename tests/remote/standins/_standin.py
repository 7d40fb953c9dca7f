"""Shared helpers of the scontrol/kubectl/sudo stand-ins (not a test module).

Each stand-in appends {"tool", "argv"} as one JSON line to $NAVARCH_STANDIN_DIR/calls.jsonl
and keeps its world in $NAVARCH_STANDIN_DIR/state.json, both under an flock so parallel
SSH sessions do not interleave. state.json may hold "delay_s" to make every call hang.
"""

import contextlib
import fcntl
import json
import os
import sys
import time

DIR = os.environ["NAVARCH_STANDIN_DIR"]


@contextlib.contextmanager
def locked():
    with open(os.path.join(DIR, "lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def record(tool):
    with locked(), open(os.path.join(DIR, "calls.jsonl"), "a") as fh:
        fh.write(json.dumps({"tool": tool, "argv": sys.argv[1:]}) + "\n")


def load():
    try:
        with open(os.path.join(DIR, "state.json")) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return {}


def save(state):
    tmp = os.path.join(DIR, "state.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, os.path.join(DIR, "state.json"))


def start(tool):
    record(tool)
    delay_s = load().get("delay_s", 0)
    if delay_s:
        time.sleep(delay_s)
