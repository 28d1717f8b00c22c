"""Profiles: every mistake is named with its file and field; the tutorial's profiles load."""

from __future__ import annotations

import re

import pytest
from harness import run_cli

from cdc_stream.errors import ConfigError
from cdc_stream.profile import load_consumer_profile, load_producer_profile

GOOD = """mysql_resource_name = "mysql-srv1"
[database]
user = "fluvio"
"""


def write(tmp_path, text, name="p.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD + 'pasword = "x"\n', "unknown field 'pasword' in [database]; check its spelling against profiles/*.toml"),
        (GOOD + "port = \"3306\"\n", "[database] port: expected int, got str"),
        ('mysql_resource_name = "x"\n[database]\nport = 1\n', "missing required field 'user' in [database]"),
        ("[database]\nuser = 'u'\n", "missing required field 'mysql_resource_name' in the top level"),
        (GOOD + "[filters]\ninclude_dbs = \"flvDb\"\n", "[filters] include_dbs: expected array, got str"),
        (GOOD + "[filters]\ninclude_tables = [\"pet\"]\n", "[filters] include_tables: 'pet' must be 'database.table'"),
        (GOOD + "[stream]\nbackend = \"kafka\"\n", "[stream] backend: Invalid enum value 'kafka'"),
        (GOOD + "[stream]\nbackend = \"embedded\"\nfluvio_endpoint = \"h:9003\"\n",
         "[stream] backend = 'embedded' but fluvio_endpoint/fluvio_profile is set"),
        (GOOD + "[fluvio]\ntopic = \"a\"\n[stream]\ntopic = \"b\"\n", "[fluvio] topic = 'a' contradicts [stream] topic = 'b'"),
        (GOOD + "[datta]\nbase_path = \"x\"\n", "unknown field 'datta' in the top level"),
        (GOOD + "[stream]\ntopic = \"{db}_{table}\"\n",
         "[stream] topic template '{db}_{table}' may only use {database} and {table}"),
        (GOOD + "[database\n", "TOML syntax error"),
        (GOOD + 'password = "${CDC_TEST_UNSET_VAR}"\n',
         "[database] password uses ${CDC_TEST_UNSET_VAR} but the environment variable CDC_TEST_UNSET_VAR is not set"),
    ],
)
def test_profile_errors_name_file_and_field(tmp_path, monkeypatch, text, message):
    monkeypatch.delenv("CDC_TEST_UNSET_VAR", raising=False)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_producer_profile(path)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


@pytest.mark.parametrize("text, message", [
    ('[replay]\nrows = "binary"\n', "[replay] rows: Invalid enum value 'binary'"),
    ('[replay]\naccounts = "yes"\n', "[replay] accounts: Invalid enum value 'yes'"),
    ('[replay]\nrow = "sql"\n', "unknown field 'row' in [replay]"),
])
def test_consumer_replay_section_is_checked(tmp_path, text, message):
    path = write(tmp_path, "[database]\nuser = 'u'\n" + text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_consumer_profile(path)
    ok = load_consumer_profile(write(tmp_path, "[database]\nuser = 'u'\n[replay]\nrows = \"sql\"\n", "ok.toml"))
    assert (ok.replay.rows, ok.replay.accounts) == ("sql", "skip")


@pytest.mark.parametrize("program, text, message", [
    ("cdc-consumer", '[replay]\nrows = "fast"\n', '[replay] rows: Invalid enum value \'fast\'; use one of "auto", "binlog", "sql"'),
    ("cdc-consumer", '[replay]\naccounts = "yes"\n', '[replay] accounts: Invalid enum value \'yes\'; use one of "skip", "apply"'),
    ("cdc-consumer", '[logging]\nformat = "text"\n', '[logging] format: Invalid enum value \'text\'; use one of "human", "json"'),
    ("cdc-producer", '[snapshot]\nmode = "once"\n',
     '[snapshot] mode: Invalid enum value \'once\'; use one of "initial", "never", "always"'),
    ("cdc-producer", '[events]\nbinlog = "yes"\n', "[events] binlog: expected bool, got str; write true or false, without quotes"),
])
def test_a_wrong_choice_names_the_accepted_values(tmp_path, program, text, message):
    head = GOOD if program == "cdc-producer" else "[database]\nuser = 'u'\n"
    path = write(tmp_path, head + text)
    result = run_cli(program, str(path))
    assert (result.returncode, result.stderr.decode()) == (2, f"error: {path}: {message}\n")


def test_toml_syntax_error_gives_the_line(tmp_path):
    path = write(tmp_path, GOOD + "port = 33 06\n")
    with pytest.raises(ConfigError, match=r"at line 4, column"):
        load_producer_profile(path)


def test_missing_profile(tmp_path):
    with pytest.raises(ConfigError, match="profile not found"):
        load_consumer_profile(tmp_path / "nope.toml")


def test_env_interpolation_and_home_expansion(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_TEST_PW", "s3cret")
    monkeypatch.setenv("HOME", str(tmp_path))
    p = load_producer_profile(write(tmp_path, GOOD + 'password = "${CDC_TEST_PW}"\n[data]\nbase_path = "~/state"\n[stream]\npath = "~/s"\n'))
    assert p.database.password == "s3cret"
    assert p.data.base_path == f"{tmp_path}/state"
    assert p.stream.path == f"{tmp_path}/s"
    assert "s3cret" not in repr(p)  # secrets never reach logs


def test_tutorial_profiles_load_as_they_are(tmp_path):
    """The Fluvio tutorial's producer_profile.toml and consumer_profile.toml, verbatim."""
    producer = load_producer_profile(write(tmp_path, """mysql_resource_name = "mysql-srv1"
[data]
base_path = "~/mysql-cdc/mysql-producer"
binlog_index_file = "binlog.index"
resume_offset_file = "producer.offset"
local_store_file = "producer.store"
[container]
name = "mysql-producer"
host_port = 3080
[filters]
include_dbs = ["flvDb", "flvDb2"]
[fluvio]
topic = "rust-mysql-cdc"
[database]
ip_or_host = "127.0.0.1"
port = 3080
user = "fluvio"
password = "fluvio4cdc!"
""", "producer.toml"))
    assert producer.stream.topic == "rust-mysql-cdc" and producer.stream.backend == "embedded"
    assert producer.filters.include_dbs == ["flvDb", "flvDb2"]
    consumer = load_consumer_profile(write(tmp_path, """[data]
base_path = "~/mysql-cdc/mysql-consumer"
last_offset_file = "consumer.offset"
[database]
ip_or_host = "0.0.0.0"
port = 3090
user = "fluvio"
password = "fluvio4cdc!"
[container]
name = "mysql-consumer"
host_port = 3090
[filters]
include_dbs = ["flvDb"]
[fluvio]
topic = "rust-mysql-cdc"
""", "consumer.toml"))
    assert (consumer.database.port, consumer.database.user, consumer.stream.topic) == (3090, "fluvio", "rust-mysql-cdc")


@pytest.mark.parametrize("program", ["cdc-producer", "cdc-consumer"])
def test_cli_profile_error_is_one_line_exit_2(tmp_path, program):
    path = write(tmp_path, GOOD + "[database]\nuser = 'x'\n" if program == "cdc-producer" else "[database]\nusr = 'x'\n")
    result = run_cli(program, str(path))
    err = result.stderr.decode()
    assert result.returncode == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {path}: ")
    assert "Traceback" not in err


def test_cli_missing_profile_file(tmp_path):
    result = run_cli("cdc-producer", str(tmp_path / "missing.toml"))
    assert result.returncode == 2
    assert result.stderr.decode().strip() == f"error: {tmp_path / 'missing.toml'}: profile not found; pass the path of a TOML profile (examples in profiles/)"
