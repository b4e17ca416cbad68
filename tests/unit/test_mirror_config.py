"""Options of the mirror: properties files, topic selection and naming, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner.mirror import (
    MirrorConfigError,
    MirrorOptions,
    TopicRouter,
    load_properties,
    parse_properties,
)


def test_java_properties_syntax() -> None:
    text = "\n".join(
        [
            "# a comment",
            "! another comment",
            "bootstrap.servers=127.0.0.1:9092",
            "group.id : mirror-1",
            "client.id   producer-a",
            "  sasl.jaas.config = a b \\",
            "      c d",
            "key\\=with\\:escapes = v\\tx\\u0041",
            "empty=",
            "trailing.space = kept  ",
            "double.equals==x",
            "",
        ]
    )
    assert parse_properties(text) == {
        "bootstrap.servers": "127.0.0.1:9092",
        "group.id": "mirror-1",
        "client.id": "producer-a",
        "sasl.jaas.config": "a b c d",
        "key=with:escapes": "v\txA",
        "empty": "",
        "trailing.space": "kept  ",
        "double.equals": "=x",
    }


def test_escaped_backslash_does_not_continue_the_line() -> None:
    assert parse_properties("path=c:\\\\\nnext=1") == {"path": "c:\\", "next": "1"}


def test_bad_unicode_escape_names_file_and_line_and_shows_none_of_the_value(
    tmp_path: Path,
) -> None:
    f = tmp_path / "consumer.properties"
    f.write_text("a=1\nsasl.password=Tr0ub4dor\\uZZ&3-secret\n")
    with pytest.raises(MirrorConfigError, match=r"consumer\.properties:2: malformed \\uXXXX") as e:
        load_properties(f)
    assert "ZZ" not in str(e.value)  # four characters of the password were shown


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MirrorConfigError, match=r"cannot read properties file .*nope"):
        load_properties(tmp_path / "nope")


@given(
    st.dictionaries(
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"])),
        max_size=5,
    )
)
def test_properties_round_trip_through_java_escaping(props: dict[str, str]) -> None:
    def escape(s: str, *, key: bool) -> str:
        out = []
        for i, ch in enumerate(s):
            if ch in "\\=:#!" or (ch == " " and (key or i == 0)):
                out.append("\\" + ch)
            elif ch in "\t\n\r\f":
                out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
            elif not ch.isprintable() and ord(ch) <= 0xFFFF:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out)

    text = "\n".join(f"{escape(k, key=True)}={escape(v, key=False)}" for k, v in props.items())
    assert parse_properties(text) == props


def test_flags_win_over_files_and_caller_dicts_stay_untouched() -> None:
    consumer = {"bootstrap.servers": "file:1", "group.id": "from-file", "fetch.min.bytes": 1}
    producer = {"bootstrap.servers": "file:2", "linger.ms": "5"}
    opts = MirrorOptions(
        source_bootstrap="src:9092",
        target_bootstrap="dst:9092",
        consumer_config=consumer,  # type: ignore[arg-type]  # non-str values are accepted
        producer_config=producer,
    )
    assert opts.consumer_config["bootstrap.servers"] == "src:9092"
    assert opts.consumer_config["group.id"] == "from-file"
    assert opts.consumer_config["fetch.min.bytes"] == "1"
    assert opts.consumer_config["enable.auto.commit"] == "false"
    assert opts.consumer_config["enable.auto.offset.store"] == "false"
    assert opts.consumer_config["auto.offset.reset"] == "earliest"
    assert opts.producer_config["bootstrap.servers"] == "dst:9092"
    assert opts.producer_config["acks"] == "all"
    assert consumer == {
        "bootstrap.servers": "file:1",
        "group.id": "from-file",
        "fetch.min.bytes": 1,
    }
    assert producer == {"bootstrap.servers": "file:2", "linger.ms": "5"}
    with pytest.raises(TypeError):
        opts.consumer_config["x"] = "y"  # type: ignore[index]  # proving it is read-only


def _opts(**kw: object) -> MirrorOptions:
    base: dict[str, object] = {
        "source_bootstrap": "src:9092",
        "target_bootstrap": "dst:9092",
        "group_id": "g",
    }
    base.update(kw)
    return MirrorOptions(**base)  # type: ignore[arg-type]  # test helper forwards keywords


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"source_bootstrap": None}, "no source cluster: pass --source"),
        ({"target_bootstrap": None}, "no target cluster: pass --target"),
        ({"group_id": None}, "no consumer group: pass --group"),
        (
            {"consumer_config": {"enable.auto.commit": "true"}},
            "enable.auto.commit=true would commit offsets of messages not yet delivered",
        ),
        ({"include": "("}, r"--include '\(' is not a valid regular expression"),
        ({"exclude": "[a"}, r"--exclude '\[a' is not a valid regular expression"),
        ({"rename": "src.{name}"}, r"must contain \{topic\} and no other field"),
        ({"rename": "fixed"}, r"must contain \{topic\}"),
        ({"rename": "a/{topic}"}, "yields illegal topic names such as 'a/t'"),
        ({"max_in_flight": 0}, "--max-in-flight must be a positive integer, not 0"),
        ({"dead_letter_topic": "bad topic"}, "'bad topic' is not a legal Kafka topic name"),
        ({"commit_interval_s": 0}, "--commit-interval must be a positive number"),
        ({"status_interval_s": -1}, "--status-interval must be >= 0"),
        (
            {"target_bootstrap": "src:9092"},
            "same cluster and --rename keeps topic names",
        ),
    ],
)
def test_bad_options_say_what_is_wrong(kw: dict[str, object], message: str) -> None:
    with pytest.raises(MirrorConfigError, match=message):
        _opts(**kw)


def test_same_cluster_is_fine_with_a_rename() -> None:
    opts = _opts(target_bootstrap="src:9092", rename="copy.{topic}")
    assert opts.router().target("orders") == "copy.orders"


def test_router_selects_whole_names_and_never_internal_topics() -> None:
    router = TopicRouter(include=r"orders.*|payments", exclude=r".*\.tmp", never=frozenset({"dlq"}))
    assert router.selects("orders")
    assert router.selects("orders-eu")
    assert router.selects("payments")
    assert not router.selects("payments-eu")  # whole-name match, as MirrorMaker 2
    assert not router.selects("orders.tmp")
    assert not router.selects("__consumer_offsets")
    assert not TopicRouter(never=frozenset({"dlq"})).selects("dlq")
    assert TopicRouter().selects("anything")


def test_rename_template() -> None:
    assert TopicRouter(rename="{topic}").target("orders") == "orders"
    assert TopicRouter(rename="src.{topic}").target("orders") == "src.orders"
    long = TopicRouter(rename="a-very-long-prefix.{topic}")
    with pytest.raises(MirrorConfigError, match="not a legal Kafka topic name"):
        long.target("x" * 240)


@pytest.mark.parametrize(
    ("rename", "written", "not_written"),
    [
        ("copy.{topic}", ["copy.orders", "copy.copy.x"], ["orders", "copy.", "copyorders"]),
        ("{topic}.bak", ["orders.bak"], ["orders", "bak", ".bak"]),
        ("{topic}-{topic}", ["a-a", "a-b-a-b"], ["a-b", "a-"]),
    ],
)
def test_the_rename_tells_which_names_the_mirror_could_have_written(
    rename: str, written: list[str], not_written: list[str]
) -> None:
    # On one cluster those are never mirrored again (docs/mirror.md).
    router = TopicRouter(rename=rename)
    assert [t for t in written if not router.could_write(t)] == []
    assert [t for t in not_written if router.could_write(t)] == []
