"""conf/pipeline.yaml -> PipelineConfig: defaults, path resolution, overrides, errors naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.engine.config import REPO_ROOT, PipelineConfigError, load_config, parse_config


def write(tmp_path: Path, text: str) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "canal.properties").write_text("canal.destinations = shop\n")
    (conf / "shop").mkdir(exist_ok=True)
    (conf / "shop" / "instance.properties").write_text(
        "canal.instance.master.address = 10.0.0.5:3310\ncanal.instance.dbUsername = repl\n"
        "canal.instance.dbPassword = secret\ncanal.instance.filter.regex = shop\\\\..*\n")
    f = conf / "pipeline.yaml"
    f.write_text(text)
    return f


def test_shipped_file_loads_with_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # the demo's source port is ${PRIVATE_MARIADB_PORT:3407}: integration tests on this worker may have set it
    monkeypatch.delenv("PRIVATE_MARIADB_PORT", raising=False)
    cfg = load_config(REPO_ROOT / "conf" / "pipeline.yaml", env={})
    assert cfg.destination == "demo" and cfg.timezone == "UTC"
    assert cfg.canal.mode == "embedded" and cfg.canal.conf_dir == REPO_ROOT / "conf" and cfg.canal.client_id == 1001
    assert cfg.sensor.interval_seconds == 30 and cfg.spark.master == "local[2]"
    assert cfg.staging_root == REPO_ROOT / ".runtime/pipeline/staging"
    assert cfg.state_dir == REPO_ROOT / ".runtime/pipeline/state/demo"
    assert cfg.lake_root == str(REPO_ROOT / ".runtime/lake") and cfg.lake.deletion_vectors is True
    assert cfg.changelog.start_date == ""  # the destination's first day
    assert cfg.sensor.reconcile_interval_seconds == 900 and cfg.sensor.reconcile_tables_per_run == 1
    kw = cfg.conn_kwargs()
    assert (kw["host"], kw["port"], kw["user"], kw["password"]) == ("127.0.0.1", 3407, "canal", "canal")


def test_the_canal_conf_follows_the_environment_it_expands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Canal conf is cached per file contents; a changed environment variable it expands is not stale."""
    cfg = load_config(REPO_ROOT / "conf" / "pipeline.yaml", env={})
    monkeypatch.setenv("PRIVATE_MARIADB_PORT", "44751")
    assert cfg.conn_kwargs()["port"] == 44751
    monkeypatch.delenv("PRIVATE_MARIADB_PORT")
    assert cfg.conn_kwargs()["port"] == 3407


def test_values_paths_and_the_canal_instance(tmp_path: Path) -> None:
    f = write(tmp_path, """
destination: shop
window: {max_rows: 1000, max_bytes: 1048576, max_wait_seconds: 2}
sensor: {interval_seconds: 10, max_failures: 2, backoff_seconds: 1.5}
paths: {staging: stage, state: /var/tmp/canal-state}
lake: {root: "s3a://bucket/lake", deletion_vectors: false}
spark: {master: "spark://h:7077", conf: {spark.executor.memory: 4g, spark.sql.ansi.enabled: true}}
changelog: {start_date: 2025-06-01}
maintenance: {cron: "30 2 * * 0", vacuum_retention_hours: 24}
""")
    cfg = load_config(f, env={})
    assert cfg.file == f and cfg.base_dir == tmp_path
    assert cfg.window.max_rows == 1000 and cfg.window.max_wait_seconds == 2.0
    assert cfg.sensor.backoff_seconds == 1.5 and cfg.sensor.max_failures == 2
    assert cfg.staging_root == tmp_path / "stage" and cfg.state_dir == Path("/var/tmp/canal-state/shop")
    assert cfg.lake_root == "s3a://bucket/lake"  # a URI is left alone
    assert cfg.lake.deletion_vectors is False
    from pipelines.defs.resources import resources_for

    lake = resources_for(cfg)["lake"].lake()
    assert lake.root == "s3a://bucket/lake" and "delta.enableDeletionVectors" not in lake.mirror_properties()
    assert cfg.spark.conf == {"spark.executor.memory": "4g", "spark.sql.ansi.enabled": "true"}
    assert cfg.changelog.start_date == "2025-06-01"  # YAML's date, as text
    kw = cfg.conn_kwargs()
    assert (kw["host"], kw["port"], kw["user"], kw["password"]) == ("10.0.0.5", 3310, "repl", "secret")
    assert cfg.instance_config().event_filter().table("shop", "orders")
    assert not cfg.instance_config().event_filter().table("other", "t")


def test_environment_overrides(tmp_path: Path) -> None:
    f = write(tmp_path, "destination: nope\n")
    env = {"CANAL_PIPELINE_CONF": str(f), "CANAL_PIPELINE_DESTINATION": "shop", "CANAL_PIPELINE_LAKE": "/data/lake",
           "CANAL_PIPELINE_STAGING": str(tmp_path / "s"), "CANAL_PIPELINE_SPARK_MASTER": "local[1]"}
    cfg = load_config(env=env)
    assert cfg.destination == "shop" and cfg.lake_root == "/data/lake"
    assert cfg.staging_root == tmp_path / "s" and cfg.spark.master == "local[1]"


@pytest.mark.parametrize(("text", "key", "words"), [
    ("windw: {max_rows: 1}\n", "windw", "unknown key"),
    ("window: {max_row: 1}\n", "window.max_row", "unknown key"),
    ("window: {max_rows: lots}\n", "window.max_rows", "not an integer"),
    ("window: {max_rows: 0}\n", "window.max_rows", "must be positive"),
    ("window: {max_wait_seconds: 30}\n", "window.max_wait_seconds", "half of"),
    ("sensor: {deadline_seconds: 70}\n", "sensor.deadline_seconds", "60 s"),
    ("canal: {mode: kafka}\n", "canal.mode", "embedded, remote, cluster"),
    ("canal: {mode: remote}\n", "canal.address", "host:port"),
    ("canal: {client_id: 40000}\n", "canal.client_id", "16-bit"),
    ("canal: {mode: cluster, zk_servers: 'z:2181', zk_allowed: '10.0.0.0/8,a b'}\n", "canal.zk_allowed",
     "'a b' is neither a network, an address nor a host name"),
    ("timezone: Asia/Shanghai\n", "timezone", "only UTC"),
    ("changelog: {start_date: yesterday}\n", "changelog.start_date", "not a date"),
    ("maintenance: {cron: '@daily'}\n", "maintenance.cron", "5-field"),
    ("maintenance: {optimize: 1}\n", "maintenance.optimize", "true or false"),
    ("freshness: {warn_seconds: 900, fail_seconds: 60}\n", "freshness.warn_seconds", "warn_seconds <= fail"),
    ("spark: {conf: {spark.jars.packages: x}}\n", "spark.conf.spark.jars.packages", "offline"),
    ("destination: missing\n", "destination", "instance.properties"),
    ("canal: {conf_dir: nowhere}\n", "canal.conf_dir", "no canal.properties"),
    ("- a\n- b\n", "(file)", "mapping"),
    ("window: [\n", "(file)", "not valid YAML"),
    ("destination: shop\ndestinations: [shop]\n", "destinations", "either destination"),
    ("destinations: []\n", "destinations", "non-empty list"),
    ("destinations: shop\n", "destinations", "non-empty list"),
    ("destinations: [shop, 'a b']\n", "destinations[1]", "not a Canal destination name"),
    ("destinations: [a-b, a_b]\n", "destinations[1]", "same Dagster name 'a_b'"),
    ("destinations: [shop, nowhere]\n", "destinations", "'nowhere': no"),
])
def test_errors_name_the_file_and_the_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    f = write(tmp_path, "destination: shop\n" + text if not text.startswith(("destination", "-")) else text)
    with pytest.raises(PipelineConfigError) as e:
        load_config(f, env={})
    assert e.value.key == key and str(e.value).startswith(f"{f}: {key}: ")
    assert words in str(e.value)


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"no such file \(from \$CANAL_PIPELINE_CONF\)"):
        load_config(env={"CANAL_PIPELINE_CONF": str(tmp_path / "absent.yaml")})


def test_parse_config_without_a_file() -> None:
    cfg = parse_config({"paths": {"staging": "/s"}}, base_dir=Path("/base"))
    assert cfg.file is None and cfg.staging_root == Path("/s")
    assert cfg.state_dir == Path("/base/.runtime/pipeline/state/example")


def test_several_destinations(tmp_path: Path) -> None:
    f = write(tmp_path, "destinations: [shop, shop-eu]\nlake: {root: lake}\n")
    (tmp_path / "conf" / "shop-eu").mkdir()
    (tmp_path / "conf" / "shop-eu" / "instance.properties").write_text(
        "canal.instance.master.address = 10.0.0.6:3310\ncanal.instance.dbUsername = repl\n"
        "canal.instance.dbPassword = secret\n")
    cfg = load_config(f, env={})
    # the config is its first destination, under that destination's names; per_destination() gives each
    assert (cfg.destination, cfg.namespace, cfg.destinations) == ("shop", "shop", ("shop", "shop-eu"))
    one, two = cfg.per_destination()
    assert (two.destination, two.namespace) == ("shop-eu", "shop_eu")   # Dagster's alphabet in names
    assert one.lake_root == f"{tmp_path / 'lake'}/shop" and two.lake_root == f"{tmp_path / 'lake'}/shop-eu"
    assert two.state_dir == tmp_path / ".runtime/pipeline/state/shop-eu"
    assert two.conn_kwargs()["host"] == "10.0.0.6" and one.conn_kwargs()["host"] == "10.0.0.5"
    # the environment's one destination replaces the list: plain names again
    solo = load_config(f, env={"CANAL_PIPELINE_DESTINATION": "shop-eu"})
    assert (solo.destination, solo.namespace, solo.per_destination()) == ("shop-eu", "", [solo])
    assert solo.lake_root == str(tmp_path / "lake")
    # one destination: the plain names and lake.root itself
    assert parse_config({"destination": "shop"}).per_destination()[0].lake_subdir == ""


def test_snapshot_settings(tmp_path: Path) -> None:
    assert (parse_config({}).snapshot.chunk_rows, parse_config({}).snapshot.chunked_above_rows) == (100_000, 1_000_000)
    cfg = load_config(write(tmp_path, "destination: shop\nsnapshot: {chunk_rows: 0}\n"), env={})
    assert cfg.snapshot.chunk_rows == 0
    with pytest.raises(PipelineConfigError) as e:
        load_config(write(tmp_path, "destination: shop\nsnapshot: {chunk_rows: -1}\n"), env={})
    assert e.value.key == "snapshot.chunk_rows"
    assert parse_config({}).snapshot.readers == 2
    assert load_config(write(tmp_path, "destination: shop\nsnapshot: {readers: 1}\n"), env={}).snapshot.readers == 1
    assert parse_config({}).snapshot.chunk_bytes == 64 * 1024 * 1024
    with pytest.raises(PipelineConfigError) as e:
        load_config(write(tmp_path, "destination: shop\nsnapshot: {chunk_bytes: 1000}\n"), env={})
    assert e.value.key == "snapshot.chunk_bytes"
    for bad in (0, 65):
        with pytest.raises(PipelineConfigError) as e:
            load_config(write(tmp_path, f"destination: shop\nsnapshot: {{readers: {bad}}}\n"), env={})
        assert e.value.key == "snapshot.readers" and "[1, 64]" in str(e.value)
