"""Configuration: the example documents every field, errors name the field, precedence holds."""

import dataclasses

import pytest
import yaml

from frexport.cli.main import main
from frexport.config import Config, ConfigError, DumpDir, load_config, validate
from tests.support import paths

EXAMPLE = paths.ROOT / "config" / "frexport.example.yaml"


def _fields(cls, prefix=""):
    for f in dataclasses.fields(cls):
        yield prefix + f.name
        tp = f.type if not isinstance(f.type, str) else eval(f.type, vars(__import__("frexport.config").config))
        if dataclasses.is_dataclass(tp):
            yield from _fields(tp, prefix + f.name + ".")


def test_example_is_valid_and_documents_every_field():
    cfg = load_config(str(EXAMPLE), env={})
    assert [p for p in validate(cfg) if not p.startswith("sources: nothing to watch")] == []
    text = EXAMPLE.read_text()
    for name in _fields(Config):
        assert f"{name.split('.')[-1]}:" in text, name


def test_example_shows_the_code_defaults():
    """What a user reads in the example is what runs when they leave a field out."""
    assert load_config(str(EXAMPLE), env={}) == Config()
    # dump_dirs is empty by default; the example documents an entry's fields in a commented block
    lines = EXAMPLE.read_text().splitlines()
    start = lines.index("  dump_dirs: []") + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  #"):
            break
        block.append(line[:2] + line[4:])  # "  #   - path: x" -> "    - path: x"; prose stays a comment
    entry = yaml.safe_load("\n".join(block))[0]
    assert set(entry) == {f.name for f in dataclasses.fields(DumpDir)}
    cfg = load_config(None, env={}, overrides={"sources.dump_dirs": [entry]})
    assert cfg.sources.dump_dirs[0] == DumpDir(path=entry["path"])


def test_check_config_prints_the_effective_configuration(tmp_path, capsys):
    assert main(["serve", "--check-config", "--sockets-dir", "/x", "--stall-after", "2m", "--log-level", "debug",
                 "--log-format", "json"]) == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed)["log"] == {"format": "json", "level": "debug"}
    f = tmp_path / "effective.yaml"
    f.write_text(printed)
    cfg = load_config(str(f), env={})
    assert cfg.sources.worker_servers.sockets_dir == "/x" and cfg.analysis.stall_after == 120.0
    assert cfg == load_config(None, env={}, overrides={"sources.worker_servers.sockets_dir": "/x",
                                                        "analysis.stall_after": "2m", "log.level": "debug",
                                                        "log.format": "json"})


@pytest.mark.parametrize("value", ["0", "0s", "-5s"])
def test_a_stall_threshold_of_zero_or_less_is_rejected(value, capsys):
    assert main(["serve", "--check-config", "--sockets-dir", "/x", f"--stall-after={value}"]) == 2
    assert "analysis.stall_after" in capsys.readouterr().err


def test_errors_name_the_field(tmp_path):
    bad = tmp_path / "c.yaml"
    for text, field in [("sources: {worker_servers: {timeout: soon}}", "sources.worker_servers.timeout"),
                        ("analysis: {stall_aftr: 5s}", "analysis.stall_aftr"),
                        ("web: {listen: 9464}", None),
                        ("sources: {dump_dirs: [{path: /x, polling: maybe}]}", "sources.dump_dirs[0].polling"),
                        ("sources: {worker_servers: {entries_via: torch}}", None)]:
        bad.write_text(text)
        if field is None:  # parsed, then refused by validate
            assert any(p.startswith(("web.listen", "sources.worker_servers.entries_via"))
                       for p in validate(load_config(str(bad), env={})))
            continue
        with pytest.raises(ConfigError) as info:
            load_config(str(bad), env={})
        assert str(info.value).startswith(field), info.value


def test_precedence_file_env_flags(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"sources": {"worker_servers": {"poll_interval": "7s", "sockets_dir": "/a"}}}))
    env = {"FREXPORT_SOURCES__WORKER_SERVERS__POLL_INTERVAL": "9s", "FREXPORT_JOB_ID": "j1", "FREXPORT_AGENT_DIR": "x"}
    cfg = load_config(str(f), env=env)
    assert cfg.sources.worker_servers.poll_interval == 9.0 and cfg.job_id == "j1"
    cfg = load_config(str(f), env=env, overrides={"sources.worker_servers.poll_interval": "2s"})
    assert cfg.sources.worker_servers.poll_interval == 2.0 and cfg.sources.worker_servers.sockets_dir == "/a"


def test_check_config_cli(tmp_path, capsys):
    assert main(["serve", "--config", str(EXAMPLE), "--sockets-dir", "/x", "--check-config"]) == 0
    assert main(["serve", "--check-config"]) == 2
    assert "nothing to watch" in capsys.readouterr().err
    assert main(["serve", "--check-config", "--sockets-dir", "/x", "--url", "zero=http://a:1"]) == 2


def test_jobview_check_config_cli(capsys):
    assert main(["jobview", "--check-config", "--peers-service", "t-frexport.ml.svc:9464", "--job-id", "t"]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["peers"]["service"] == "t-frexport.ml.svc:9464" and "is valid" in err
    assert main(["jobview", "--check-config"]) == 2
    assert "nothing to gather" in capsys.readouterr().err
    assert main(["jobview", "--check-config", "--peers-service", "no-port"]) == 2


def test_environment_text_keeps_its_type(tmp_path):
    env = {"FREXPORT_JOB_ID": "true", "FREXPORT_SOURCES__WORKER_SERVERS__SOCKETS_DIR": "null",
           "FREXPORT_TRACES__ENABLED": "yes", "FREXPORT_ANALYSIS__STALL_AFTER": "2m",
           "FREXPORT_SOURCES__DUMP_DIRS": "[{path: /shared/dumps, polling: true}]",
           "FREXPORT_SOURCES__WORKER_SERVERS__CONCURRENCY": "4"}
    cfg = load_config(None, env=env)
    assert cfg.job_id == "true" and cfg.sources.worker_servers.sockets_dir == "null"
    assert cfg.traces.enabled is True and cfg.analysis.stall_after == 120.0
    assert cfg.sources.dump_dirs[0].path == "/shared/dumps" and cfg.sources.dump_dirs[0].polling is True
    assert cfg.sources.worker_servers.concurrency == 4
    with pytest.raises(ConfigError, match="traces.enabled"):
        load_config(None, env={"FREXPORT_TRACES__ENABLED": "maybe"})
