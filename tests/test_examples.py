"""Every scenario in examples/ loads and compiles (parsed, validated, workloads built, steps lowered
to the plan; no process and no segment), and what the examples and docs/rack.md say about them
agrees with the code: key counts written in comments, the default rack's table, and the example
files quoted in docs/rack.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster.rack import compile_scenario
from cluster.scenario import LoadStep, RunStep, default_scenario, load_scenario
from cluster.spec import DEFAULT_WORKLOAD_OVERRIDES

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
RACK_MD = (ROOT / "docs" / "rack.md").read_text()


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"minimal.toml", "ycsb-switch.toml", "kill.toml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_and_compiles(path):
    s = load_scenario(path)
    c = compile_scenario(s)
    if s.spec.workloads["default"].transactional:     # tables loaded with the rack (docs/dtx.md)
        assert c.plan and not any(isinstance(st, LoadStep) for st in c.plan)
        return
    assert c.plan and isinstance(c.plan[0], LoadStep)
    # the plan is the scenario's typed steps: only loads and runs name a workload
    assert all(n in c.workloads for n in {st.workload for st in c.plan if isinstance(st, (LoadStep, RunStep))})
    assert c.capacity > c.plan[0].count


def _numbers_before(word: str, text: str) -> list[int]:
    return [int(m.replace(",", "")) for m in re.findall(rf"(\d[\d,]*)\s+(?:[\w-]+\s+)?{word}\b", text)]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_key_counts_in_comments_are_the_loaded_ones(path):
    """A comment such as "YCSB-A over 10,000 keys" or "insert the default workload's 20,000 keys"
    must state the number of keys the load step really loads."""
    comments = "\n".join(line.partition("#")[2] for line in path.read_text().splitlines())
    loaded = {st.count for st in compile_scenario(load_scenario(path)).plan if st.action == "load"}
    for n in _numbers_before("keys", comments):
        assert n in loaded, f"{path.name}: a comment says {n:,} keys; the load steps load {sorted(loaded)}"


def test_docs_default_rack_states_the_code_defaults():
    s = default_scenario()
    records = DEFAULT_WORKLOAD_OVERRIDES["recordcount"]
    row = next(line for line in RACK_MD.splitlines() if line.startswith("| workload |"))
    assert f"{records:,} keys" in row and f"{DEFAULT_WORKLOAD_OVERRIDES['valuesize']}-byte" in row
    steps = next(line for line in RACK_MD.splitlines() if line.startswith("| steps |"))
    assert f"{records:,} keys" in steps
    spec = s.spec
    compute = next(line for line in RACK_MD.splitlines() if line.startswith("| compute |"))
    assert f"{spec.compute.count} nodes x {spec.compute.threads} threads x {spec.compute.coroutines} coroutines" \
        in compute
    memory = next(line for line in RACK_MD.splitlines() if line.startswith("| memory |"))
    assert f"{spec.memory.count} nodes x {spec.memory.memory_bytes >> 20} MiB" in memory


def test_examples_quoted_in_docs_are_the_files():
    """docs/rack.md's "`examples/NAME.toml` -- ..." blocks hold the same tables as the files."""
    quoted = re.findall(r"`examples/([\w.-]+\.toml)`[^\n]*\n\n```toml\n(.*?)```", RACK_MD, re.S)
    assert {name for name, _ in quoted} == {p.name for p in EXAMPLES}
    for name, block in quoted:
        assert tomllib.loads(block) == tomllib.loads((ROOT / "examples" / name).read_text()), name
