"""The one YAML reader: its bounds refuse what they must and nothing else."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.ir.errors import ProblemLog
from kalena.ir.yamlio import MAX_DEPTH, check_bounds, parse_yaml, parse_yaml_all, read_text

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
_data = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=5)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(_data, st.booleans())
def test_plain_data_reads_back_unchanged(data, flow):
    text = yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True)
    log = ProblemLog("f.yaml")
    ok, got = parse_yaml(text, log)
    assert ok and not log.problems
    assert got == yaml.safe_load(text)


def _nested(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth - 1)) + "  " * (depth - 1) + "k: 1\n"


def test_nesting_up_to_the_bound_is_read_and_one_deeper_is_refused():
    log = ProblemLog("f.yaml")
    assert parse_yaml(_nested(MAX_DEPTH), log)[0] and not log.problems
    log = ProblemLog("f.yaml")
    assert not parse_yaml(_nested(MAX_DEPTH + 1), log)[0]
    assert [p.message for p in log.problems] == [
        f"nesting deeper than {MAX_DEPTH} levels at line {MAX_DEPTH + 1}"
    ]


def _bomb(levels: int, width: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_aliases_count_as_what_they_expand_to():
    # the lists hold 1 + 10, 1 + 10 * 11 and 1 + 10 * 111 values; plus 3 keys and the mapping: 1,237
    log = ProblemLog("f.yaml")
    assert check_bounds(_bomb(3, 10), log, max_values=1237) and not log.problems
    log = ProblemLog("f.yaml")
    assert not check_bounds(_bomb(3, 10), log, max_values=1236)
    assert "once aliases are expanded" in log.problems[0].message


def test_an_alias_bomb_is_refused_at_once():
    log = ProblemLog("f.yaml")
    ok, _ = parse_yaml(_bomb(9, 9), log)  # 9**9 = 387 million strings once expanded
    assert not ok and "an alias bomb?" in log.problems[0].message


def test_merge_keys_and_shared_anchors_are_ordinary_yaml():
    text = "base: &b {cpu: 1, ram: 2}\nweb: {<<: *b, ram: 4}\napi: *b\n"
    ok, data = parse_yaml(text, ProblemLog("f.yaml"))
    assert ok and data == {
        "base": {"cpu": 1, "ram": 2},
        "web": {"cpu": 1, "ram": 4},
        "api": {"cpu": 1, "ram": 2},
    }


def test_a_cycle_is_refused_naming_the_alias():
    log = ProblemLog("f.yaml")
    assert not parse_yaml("a: &loop\n  b: *loop\n", log)[0]
    assert log.problems[0].message == "alias *loop at line 2 is inside the node it names (a cycle)"


def test_anchors_are_per_document():
    log = ProblemLog("f.yaml")
    ok, docs = parse_yaml_all("a: &x 1\n---\nb: *x\n", log)
    assert not ok and "undefined alias" in log.problems[0].message
    ok, docs = parse_yaml_all("a: &x 1\n---\nb: &x 2\nc: *x\n", ProblemLog("f.yaml"))
    assert ok and docs == [{"a": 1}, {"b": 2, "c": 2}]


def test_duplicate_keys_are_reported_with_their_line():
    log = ProblemLog("f.yaml")
    ok, _ = parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", log)
    assert ok and [(p.message, p.value) for p in log.problems] == [
        ("duplicate key at line 4 (YAML would keep only the last)", "c")
    ]


def test_a_file_is_read_up_to_its_bound_only(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_bytes(b"a: " + b"x" * 2000 + b"\n")
    log = ProblemLog(str(p))
    assert read_text(p, log, max_bytes=2004) is not None
    log = ProblemLog(str(p))
    assert read_text(p, log, max_bytes=2003) is None
    assert log.problems[0].message == "file is larger than 2003 bytes, the limit for one input file"


def test_bad_bytes_are_named_by_offset(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("name: café\n".encode("latin-1"))
    log = ProblemLog(str(p))
    assert read_text(p, log) is None
    assert (log.problems[0].message, log.problems[0].value) == (
        "file is not UTF-8 text (byte 9)",
        "e9",
    )
