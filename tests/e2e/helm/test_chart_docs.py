"""What the chart's README and NOTES tell users, checked against the code: the commands they give
run, the flags they name exist, the torch they promise is the one the tests run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from tests.support.helm_tools import CHART, ROOT, docs_of, one

README = (CHART / "README.md").read_text()


def _notes(helm, tmp_path, *args: str) -> str:
    chart = tmp_path / "frexport"
    shutil.copytree(CHART, chart, symlinks=False)
    (chart / "templates" / "zz-notes.yaml").write_text(  # NOTES.txt renders only on install
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        "  notes: {{ include \"frexport.notes\" . | toJson }}\n")
    out = helm.template("--show-only", "templates/zz-notes.yaml", *args, chart=chart, release="obs")
    return one(docs_of(out), "ConfigMap")["data"]["notes"]


def test_the_notes_upgrade_command_works_from_the_repository_root(helm, tmp_path):
    text = _notes(helm, tmp_path)
    command = re.search(r"^  (helm upgrade (?:.*\\\n)*.*)$", text, re.M)
    argv = command.group(1).replace("\\\n", " ").split()
    assert argv[:4] == ["helm", "upgrade", "obs", "./helm/frexport"] and "--reuse-values" in argv
    # helm template takes the same chart path and --set flags (no cluster here for --reuse-values)
    args = ["template", *argv[2:4], *[a for a in argv[4:] if a != "--reuse-values"]]
    out = subprocess.run([str(helm.path), *args], cwd=ROOT, env=helm.env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    docs = docs_of(out.stdout)
    for kind in ("PodMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    sets = [a for a in argv[argv.index("--reuse-values") + 1:]]
    assert sets and "WARNING" not in _notes(helm, tmp_path / "again", *sets)  # the fix silences the warning


def test_every_inject_flag_the_chart_readme_names_exists():
    help_text = subprocess.run([sys.executable, "-m", "frexport", "inject", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    spans = re.findall(r"`frexport inject([^`]*)`", README)  # `frexport inject --flag ...` in the text
    named = {f for span in spans for f in re.findall(r"--[a-z][a-z-]*", span)}
    assert {"--peers-api", "--web-config-secret", "--web-tls-secret"} <= named
    assert [f for f in named if f not in help_text] == []
    assert "yet" not in README.split("### Support matrix")[0].split("FREXPORT_JOB_ID")[-1][:600]


def test_the_webhook_adds_the_peers_endpoint_where_the_chart_turns_it_on(helm):
    def args(*sets: str) -> list[str]:
        docs = docs_of(helm.template("-f", str(CHART / "ci" / "webhook-values.yaml"), *sets))
        return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--peers-api" not in args()
    secure = args("--set", "sidecar.peersApi=true", "--set", "webConfig.enabled=true")
    assert "--peers-api" in secure and "--peers-api-unauthenticated" not in secure
    open_ = args("--set", "sidecar.peersApi=true", "--set", "jobView.allowUnauthenticated=true")
    assert "--peers-api" in open_ and "--peers-api-unauthenticated" in open_


def test_the_support_matrix_names_the_torch_the_tests_run():
    pinned = re.search(r"pip install torch==(\S+)", (ROOT / "scripts" / "setup.sh").read_text()).group(1)
    matrix = README.split("### Support matrix")[1].split("###")[0]
    first_row = [line for line in matrix.splitlines() if line.startswith("| 2.")][0]
    assert first_row.startswith(f"| {pinned} |") and "the tests run real gloo jobs on " + pinned in first_row
    assert "FREXPORT_AGENT_SNAPSHOT_INTERVAL" in matrix and "_WorkerServer" in matrix
    # the agent's own test of the fallback exists
    assert "FREXPORT_AGENT_FORCE_SNAPSHOTS" in (ROOT / "tests" / "e2e" / "test_agent.py").read_text()
