"""The end of the plan waits for the operations still in flight (nodes/manager.py, DRAIN).

A timed run ends with its window while its stragglers finish afterwards. Before, the manager ended
the plan at once, ``ctx.stopped`` fired, and a server actor that polls (DPA-Store's host patchers)
ended while a client still waited for it: in a rack of processes that client gave up after its
resends ("no reply from the DPA behind cn0"), how often depending on the host's load. Now the
manager DRAINs every live compute node after the last step and ends (so the plan is over for the
actors) only when each has answered DONE, i.e. when its last straggler has finished, or after
``DRAIN_LIMIT_NS``."""
from nodes.manager import DRAIN_LIMIT_NS, ColocatedLink, Manager
from nodes.steps import RunStep
from shm.sim.env import INF, Environment
from shm.sim.router import MSG_DONE, MSG_DRAIN, MSG_START

LATENCY = 1_000
WINDOW_MS = 0.01                      # a 10 µs run step
STRAGGLER_NS = 30_000                 # the last operation of cn0 returns 30 µs after the window


def rack(env, stragglers: dict[int, int | None], *, log=None):
    """A manager and two fake compute nodes on a co-located link; ``stragglers[addr]`` is how long
    after the DRAIN node ``addr`` still has an operation in flight (None: forever)."""
    link = ColocatedLink(env)
    plan = [RunStep(index=1, workload="w", duration_ms=WINDOW_MS)]
    got = []
    mgr = Manager(env, plan, {0: "cn0", 1: "cn1"}, link.sender(2), latency_ns=LATENCY,
                  log=log or (lambda *a: None))
    link.bind(2, mgr.on_message)
    for addr in (0, 1):
        send = link.sender(addr)

        def node(src, payload, addr=addr, send=send):
            got.append((addr, payload[0], env.now))
            if payload[0] == MSG_START:
                end = int(payload[2]) + plan[0].duration_ns
                send(2, end + LATENCY, (MSG_DONE, int(payload[1]), end, 0))
            elif payload[0] == MSG_DRAIN and stragglers[addr] is not None:
                done = env.now + stragglers[addr]
                send(2, done + LATENCY, (MSG_DONE, len(plan), done, 0))
        link.bind(addr, node)
    return mgr, got


def test_the_plan_ends_after_the_last_straggler():
    env = Environment()
    mgr, got = rack(env, {0: STRAGGLER_NS, 1: 0})
    proc = env.process(mgr.run())
    ended = []
    proc.callbacks.append(lambda _ev: ended.append(env.now))   # what fires ctx.stopped
    env.run()
    drains = [(a, t) for a, kind, t in got if kind == MSG_DRAIN]
    assert sorted(a for a, _ in drains) == [0, 1]
    drained_at = drains[0][1]
    assert ended == [drained_at + STRAGGLER_NS + LATENCY]      # cn0's DONE, one message later
    assert mgr.step == len(mgr.plan) and not mgr.statistics().waiting_for
    # the drain's deadline is withdrawn once every node answered: the run (its clock, the
    # dashboard's vtime and speed) ends with the plan, not DRAIN_LIMIT_NS after it
    assert env.now == ended[0] and env.peek() == INF


def test_an_operation_stuck_for_good_cannot_hold_the_rack_open():
    env = Environment()
    lines = []
    mgr, got = rack(env, {0: None, 1: 0}, log=lambda t, kind, node, text: lines.append((kind, text)))
    proc = env.process(mgr.run())
    env.run()
    assert proc.triggered
    drained_at = next(t for a, kind, t in got if kind == MSG_DRAIN)
    assert env.now == drained_at + DRAIN_LIMIT_NS
    assert ("fault", f"operations still in flight on cn0 after {DRAIN_LIMIT_NS / 1e6:g} ms past the plan; "
            "the rack ends without them") in lines
