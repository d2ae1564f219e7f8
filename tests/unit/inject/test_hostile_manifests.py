"""`frexport inject` on hostile manifests (issue 38, point 7), through the command as a user runs it:
what it cannot do is one line on stderr and exit 2, never a traceback; the fields it echoes are
escaped; the shell commands it suggests are quoted; it says a TrainJob is marked only when it is."""

import io
import shlex
import sys

import pytest
import yaml

from frexport.cli.main import main


def _inject(monkeypatch, capsys, text: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    rc = main(["inject", "-"])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("text", [
    "a: " + "[" * 50_000 + "]" * 50_000 + "\n",
    "a:\n" + "".join("  " * i + "b:\n" for i in range(1, 1000)),
    "kind: ConfigMap\ndata: {a: " + "[" * 400 + "]" * 400 + "}\n",  # read, but too deep to write back
], ids=["flow-50000", "block-1000", "written-400"])
def test_yaml_nested_too_deeply_is_one_line_and_exit_2(monkeypatch, capsys, text):
    rc, out, err = _inject(monkeypatch, capsys, text)
    assert (rc, out) == (2, "") and err.count("\n") == 1 and "nested too deeply" in err, err[-300:]


@pytest.mark.parametrize("ref, says", [
    ("torch-distributed", "spec.runtimeRef is not a mapping"),
    ("{kind: ClusterTrainingRuntime}", "spec.runtimeRef.name is missing"),
    ("{name: r, kind: Deployment}", "spec.runtimeRef.kind 'Deployment' is not TrainingRuntime or "
                                    "ClusterTrainingRuntime"),
])
def test_a_trainjob_whose_runtime_ref_is_malformed_is_one_line_and_exit_2(monkeypatch, capsys, ref, says):
    rc, out, err = _inject(monkeypatch, capsys, f"kind: TrainJob\nmetadata: {{name: t}}\nspec: {{runtimeRef: {ref}}}\n")
    assert (rc, out) == (2, "") and err.startswith(f"frexport inject: TrainJob t: {says}") and err.count("\n") == 1


FORGED = "t\x1b[31mRED\u202e\nfrexport inject: TrainJob x: all good"


def test_echoed_fields_are_escaped_and_suggested_commands_quoted(monkeypatch, capsys):
    job = {"kind": "TrainJob", "metadata": {"name": FORGED, "uid": "u1"},
           "spec": {"runtimeRef": {"name": "x; rm -rf ~", "kind": "TrainingRuntime"}}}
    rc, _, err = _inject(monkeypatch, capsys, yaml.safe_dump(job))
    assert rc == 0
    lines = err.splitlines()
    assert all(line.startswith("frexport inject: ") for line in lines) and len(lines) == 3, lines
    assert "\x1b" not in err and "\u202e" not in err and "t\\x1b[31mRED\\u202e\\nfrexport inject: TrainJob x" in err
    suggested = lines[1].rpartition("inject its runtime instead: ")[2]
    assert shlex.split(suggested) == ["kubectl", "get", "trainingruntime", "x; rm -rf ~", "-o", "yaml", "|",
                                      "frexport", "inject", "-"]
    replace = lines[2].rpartition("re-create it with ")[2].split(" (deletes")[0]
    assert shlex.split(replace) == ["kubectl", "replace", "--force", "-f",  # one argument, whatever the name holds
                                    "t\\x1b[31mRED\\u202e\\nfrexport inject: TrainJob x: all good.yaml"]


def test_a_job_name_with_shell_metacharacters_is_quoted_in_the_advice(monkeypatch, capsys):
    job = {"kind": "Job", "metadata": {"name": "train$(id)", "uid": "u1"},
           "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}}}
    rc, _, err = _inject(monkeypatch, capsys, yaml.safe_dump(job))
    assert rc == 0 and "(> 'train$(id).yaml')" in err and "kubectl replace --force -f 'train$(id).yaml'" in err


@pytest.mark.parametrize("planted", [
    {"manager": "frexport.io/inject"},
    {"manager": "frexport.io/inject", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {
            "frexport.io/inject": "false"}}}}}}]}}}},
    {"manager": "frexport.io/inject", "trainingRuntimeSpec": "x"},
])
def test_a_planted_patch_with_frexports_manager_is_refused_never_reported_marked(monkeypatch, capsys, planted):
    """Before, inject found its manager's name, added nothing and said the TrainJob was marked."""
    job = {"kind": "TrainJob", "metadata": {"name": "t"},
           "spec": {"runtimeRef": {"name": "r"}, "runtimePatches": [planted]}}
    rc, out, err = _inject(monkeypatch, capsys, yaml.safe_dump(job))
    assert (rc, out) == (2, "") and "marked" not in err and err.count("\n") == 1, err
    assert "frexport inject: TrainJob t: spec.runtimePatches has a patch of manager frexport.io/inject that does " \
           "not annotate" in err


def test_a_trainjob_marked_before_is_reported_marked_and_left_as_it_is(monkeypatch, capsys):
    job = {"kind": "TrainJob", "metadata": {"name": "t"}, "spec": {"runtimeRef": {"name": "r"}}}
    rc, out, err = _inject(monkeypatch, capsys, yaml.safe_dump(job))
    assert rc == 0 and "TrainJob t: marked for the admission webhook" in err
    again = yaml.safe_dump(yaml.safe_load(out))
    rc, out, err = _inject(monkeypatch, capsys, again)
    assert rc == 0 and yaml.safe_load(out) == yaml.safe_load(again) and "TrainJob t: marked" in err


def test_an_object_read_back_with_metadata_of_the_wrong_shape_is_one_line_and_exit_2(monkeypatch, capsys):
    """Not a workload, so never patched: its advice read metadata.name and raised (a traceback)."""
    rc, out, err = _inject(monkeypatch, capsys, "kind: ConfigMap\nmetadata: [1]\nstatus: {}\n")
    assert (rc, out) == (2, "") and err.count("\n") == 1 and "does not have the shape" in err
