"""Node processes as the operating system sees them: their names in the process table."""

from __future__ import annotations

import threading
import time

import psutil

from cluster.supervisor import Supervisor
from tests.test_rack import LOAD, scenario


def _watch_children(stop: threading.Event, seen: dict) -> None:
    """Every child (any depth) whose command line starts with ``dmrack-``: pid -> (cmdline, comm)."""
    while not stop.is_set():
        for kid in psutil.Process().children(recursive=True):
            try:
                with open(f"/proc/{kid.pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{kid.pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue                        # gone meanwhile
            if cmdline.startswith(b"dmrack-"):
                seen[kid.pid] = (cmdline, comm)
        time.sleep(0.05)


def test_two_racks_side_by_side_name_their_processes_apart():
    """``ps -ef``/htop read /proc/<pid>/cmdline, which showed the supervisor's command line (e.g.
    ``dmrack up``) for every node; PR_SET_NAME only changes ``comm``. Both must name the node, and
    two racks running at once (both had ``dmrack-cn0``) must differ in both: the rack's id is in
    the name, whole in the command line (with the rack's name and the supervisor's pid), as much of
    it as fits in comm's 15 bytes."""
    seen: dict[int, tuple[bytes, str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_children, args=(stop, seen), daemon=True)
    watcher.start()
    sups = [Supervisor(scenario(LOAD, {"action": "run"}), duration_s=2.5, quiet=True) for _ in range(2)]
    status = {}
    # the second rack runs in a thread (a supervisor off the main thread leaves signals alone)
    other = threading.Thread(target=lambda: status.setdefault(1, sups[1].run()), daemon=True)
    try:
        other.start()
        status[0] = sups[0].run()
        other.join(120)
    finally:
        stop.set()
        watcher.join()
    assert status == {0: 0, 1: 0}, [s.deaths for s in sups]
    ids = [s.state.rack_id for s in sups]
    assert ids[0] != ids[1] and all(len(i) == 8 for i in ids), ids
    titles = {cmd.split(b"\0")[0].strip().decode(): comm for cmd, comm in seen.values()}
    for rack_id in ids:
        for node in ("cn0", "mn0", "mn1", "mgr"):
            title = next((t for t in titles if t.startswith(f"dmrack-{node}-{rack_id} ")), None)
            assert title is not None, (node, rack_id, titles)
            assert title.endswith(f"(rack {sups[0].compiled.spec.name}, supervisor {psutil.Process().pid})"), title
            assert titles[title] == f"dmrack-{node}-{rack_id}"[:15]     # PR_SET_NAME: the name's first 15 bytes
    comms = {comm for comm in titles.values() if comm.startswith("dmrack-cn0-")}
    assert len(comms) == 2, comms                                         # ps tells the two cn0 apart
