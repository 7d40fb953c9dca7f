"""Shared helpers of the scontrol/kubectl/sudo stand-ins (not a test module).

Each stand-in appends {"tool", "argv"} as one JSON line to $NAVARCH_STANDIN_DIR/calls.jsonl
and keeps its world in $NAVARCH_STANDIN_DIR/state.json, both under an flock so parallel
SSH sessions do not interleave. state.json may hold "delay_s" to make every call hang, or
"gate": a file name in $NAVARCH_STANDIN_DIR each call waits for (a test opens the gate).
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
    """Record the call; then hang for delay_s, or hold a concurrency slot for hold_s.

    While held, state.json "active" counts the calls in flight and "max_active" keeps
    the most seen at once.
    """
    record(tool)
    state = load()
    if state.get("delay_s"):
        generation = _generation()
        time.sleep(state["delay_s"])
        # A call left running by a timed-out step must not touch the next test's world.
        if _generation() != generation:
            sys.exit(0)
    if state.get("gate"):  # wait until the test opens the gate (creates the file), at most 60 s
        generation = _generation()
        for _ in range(1200):
            if os.path.exists(os.path.join(DIR, state["gate"])):
                break
            time.sleep(0.05)
        if _generation() != generation:
            sys.exit(0)
    if state.get("hold_s"):
        _count(+1)
        time.sleep(state["hold_s"])
        _count(-1)


def _generation():
    try:
        with open(os.path.join(DIR, "generation")) as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def _count(delta):
    with locked():
        state = load()
        state["active"] = state.get("active", 0) + delta
        state["max_active"] = max(state.get("max_active", 0), state["active"])
        save(state)
