"""Node processes as the operating system sees them: their names in the process table."""

from __future__ import annotations

import threading
import time

import psutil

from cluster.supervisor import Supervisor
from tests.test_rack import LOAD, scenario


def test_node_processes_show_their_name_in_the_command_line():
    """``ps -ef``/htop read /proc/<pid>/cmdline, which showed the supervisor's command line (e.g.
    ``dmrack up``) for every node; PR_SET_NAME only changes ``comm``. Both must name the node."""
    seen: dict[int, tuple[bytes, str]] = {}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for kid in psutil.Process().children():
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

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        sup = Supervisor(scenario(LOAD, {"action": "run"}), duration_s=2.5, quiet=True)
        assert sup.run() == 0, sup.deaths
    finally:
        stop.set()
        t.join()
    titles = {cmd.split(b"\0")[0].strip().decode(): comm for cmd, comm in seen.values()}
    assert {"dmrack-cn0", "dmrack-mn0", "dmrack-mn1", "dmrack-mgr"} <= set(titles), titles
    assert titles["dmrack-cn0"] == "dmrack-cn0"     # PR_SET_NAME is kept
