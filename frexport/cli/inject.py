"""`frexport inject [FILE|-]`: add frexport to the workloads in Kubernetes YAML, stdin to stdout.

    frexport inject manifests.yaml > with-frexport.yaml       # multi-document YAML, Lists too
    kubectl get job train -o yaml | frexport inject - > train.yaml && kubectl replace --force -f train.yaml

Every pod template of a Pod, Job, CronJob, JobSet, PyTorchJob (and the other Kubeflow kinds),
Kubeflow Trainer's TrainingRuntime and ClusterTrainingRuntime, Deployment, StatefulSet, DaemonSet or
ReplicaSet gets the sidecar, the shared volume and the agent (frexport/inject/pod.py says what and
why); a TrainJob is marked for the admission webhook (frexport/inject/trainer.py says why); other
objects pass through unchanged. The trainer's command is not touched. A workload read back from the
cluster loses what the API server set (uid, resourceVersion, status, managedFields, a Job's generated
selector: frexport/inject/existing.py) and stderr says what it takes to reach its pods: a Job, JobSet,
PyTorchJob or TrainJob must be re-created, a Deployment or StatefulSet rolls by itself.
Exit 0, or 2 with the reason on stderr when an object cannot be patched.
"""

from __future__ import annotations

import argparse
import sys

from frexport.inject.pod import InjectError, Settings, check_settings

# yaml and the patchers are imported when the command runs: `frexport` builds every command's parser
# (this one's and the webhook's settings), and analyze should not start by loading them


def add_parser(sub) -> None:
    p = sub.add_parser("inject", help="add the frexport sidecar and agent to Kubernetes workload YAML",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", default="-", help="YAML file, or - for stdin (default)")
    add_settings_args(p)


def add_settings_args(p: argparse.ArgumentParser) -> None:
    """What shapes the patch; shared by `frexport inject` and `frexport webhook`."""
    d = Settings()
    p.add_argument("--image", default=d.image, help=f"frexport image (default {d.image})")
    p.add_argument("--shared-dir", default=d.shared_dir, help=f"shared volume's mount path (default {d.shared_dir})")
    p.add_argument("--agent-dir", default=d.agent_dir, help=f"where the trainer mounts the agent ({d.agent_dir})")
    p.add_argument("--port", type=int, default=d.port, help=f"metrics port (default {d.port})")
    p.add_argument("--cpu", default=d.cpu, help=f"sidecar CPU, requests = limits (default {d.cpu})")
    p.add_argument("--memory", default=d.memory, help=f"sidecar memory, requests = limits (default {d.memory})")
    p.add_argument("--container", action="append", default=[], metavar="NAME",
                   help="trainer container to activate the agent in (repeatable; default: every container)")
    p.add_argument("--drain-seconds", type=int, default=d.drain_seconds,
                   help=f"sidecar preStop delay (default {d.drain_seconds})")
    p.add_argument("--web-config-secret", default="", metavar="SECRET",
                   help="Secret with web-config.yml (TLS/basic auth, the chart's webConfig.secretName)")
    p.add_argument("--web-tls-secret", default="", metavar="SECRET",
                   help="kubernetes.io/tls Secret the web config's TLS files come from (mounted at /etc/frexport/tls)")
    p.add_argument("--web-basic-auth", action="store_true",
                   help="the web config asks for basic auth: probe the port with tcpSocket")
    p.add_argument("--peers-api", action="store_true",
                   help="the sidecar serves its ranks' live window to the job-level view (/api/v1/ranks, "
                        "`frexport jobview`); needs --web-config-secret or --peers-api-unauthenticated")
    p.add_argument("--peers-api-unauthenticated", action="store_true",
                   help="serve the peers endpoint without a web config (only on a network nothing else reaches)")


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(image=args.image, shared_dir=args.shared_dir, agent_dir=args.agent_dir, port=args.port,
                    cpu=args.cpu, memory=args.memory, containers=args.container, drain_seconds=args.drain_seconds,
                    web_config_secret=args.web_config_secret, web_tls_secret=args.web_tls_secret,
                    web_basic_auth=args.web_basic_auth, peers_api=args.peers_api,
                    peers_api_unauthenticated=args.peers_api_unauthenticated)


def run_inject(args: argparse.Namespace) -> int:
    import yaml

    from frexport.inject.workloads import inject_object

    s = settings_from(args)
    try:
        check_settings(s)
    except InjectError as exc:
        return _fail(str(exc))
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        return _fail(f"cannot read {args.file}: {exc}")
    except RecursionError:  # the parser recurses per level: 50 000 nested brackets
        return _fail(f"cannot read {args.file}: nested too deeply (over Python's recursion limit)")
    patched, notes = 0, []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            return _fail(f"document {i + 1} is not a Kubernetes object")
        meta = doc.get("metadata")
        what = f"{doc.get('kind')} {meta.get('name', '?') if isinstance(meta, dict) else '?'}"
        try:
            patched += inject_object(doc, s)
            notes += _notes(doc)
        except InjectError as exc:
            return _fail(f"{what}: {exc}")
        except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
            # a field of the wrong shape (containers a string, metadata a list): the schema says, not a traceback
            return _fail(f"document {i + 1} ({what}): a field does not have the shape Kubernetes gives it "
                         f"({type(exc).__name__}: {exc}); check it with kubectl apply --dry-run=server")
    try:
        out = yaml.safe_dump_all(docs, sort_keys=False)  # whole, before any of it is written
    except RecursionError:  # read, but deeper than the emitter recurses (a few hundred levels)
        return _fail("a document is nested too deeply to write back (over Python's recursion limit)")
    # in parts: one write of megabytes to a pipe whose reader left (`| head`) ended the process silently
    # with status 0 here, where parts raise BrokenPipeError (exit 141, cli/main.py)
    for i in range(0, len(out), 1 << 16):
        sys.stdout.write(out[i:i + (1 << 16)])
    sys.stdout.flush()
    _say(f"{patched} pod template(s) patched")
    for note in notes:
        _say(note)
    return 0


def _say(message: str) -> None:
    """One line on stderr. What it echoes of the input (names, kinds, errors quoting them) is escaped as
    repr escapes it, so a field cannot color, move or forge the lines around it."""
    print("frexport inject: " + "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message), file=sys.stderr)


def _fail(message: str) -> int:
    _say(message)
    return 2


def _notes(doc: dict) -> list[str]:
    """Drop the server's fields of each object read back from the cluster; say how each takes effect."""
    from frexport.inject import trainer
    from frexport.inject.existing import from_server, how_to_apply, strip_server_fields

    items = doc["items"] if (doc.get("kind") or "").endswith("List") and isinstance(doc.get("items"), list) else [doc]
    notes = []
    for obj in (o for o in items if isinstance(o, dict)):
        if obj.get("kind") == trainer.TRAINJOB and trainer.marked(obj):  # said only where it is so
            notes.append(trainer.webhook_note(obj))
        if from_server(obj):
            notes.append(how_to_apply(obj))
    strip_server_fields(doc)
    return notes
