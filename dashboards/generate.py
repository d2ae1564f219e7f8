"""The one source of frexport's Grafana dashboards (Grafana 11, schemaVersion 39).

    python dashboards/generate.py          # write dashboards/*.json
    python dashboards/generate.py --check  # fail if the checked-in JSON differs from this source

A small generator instead of a dashboard SDK: the panels frexport needs are few, and plain dicts
keep the output exactly reviewable. Every panel and target uses the `datasource` variable; every
query filters by namespace and job (and by pg and rank where they apply).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace", job=~"$job"'
SEL_RANK = SEL + ', rank=~"$rank"'
SEL_PG = SEL_RANK + ', pg=~"$pg"'
RUNBOOKS = ["FrexportRankStalled", "FrexportRankBehindPeers", "FrexportCollectiveNearTimeout",
            "FrexportTimeoutDumpWritten", "FrexportDesyncDetected", "FrexportStraggler", "FrexportSourceDown",
            "FrexportExporterAbsent", "FrexportNoRanksSeen"]


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping to new rows."""

    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.x = self.y = self.row_h = 0

    def add(self, panel: dict, w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series") -> dict:
    t = {"datasource": DS, "expr": expr, "refId": ref, "legendFormat": legend or "__auto", "format": fmt}
    if instant:
        t.update(instant=True, range=False)
    return t


def panel(kind: str, title: str, description: str, targets: list[dict], unit: str = "short", **extra) -> dict:
    p = {"type": kind, "title": title, "description": description, "datasource": DS, "targets": targets,
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "options": {}}
    p.update(extra)
    return p


def timeseries(title, description, targets, unit="short", **extra):
    return panel("timeseries", title, description, targets, unit,
                 options={"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]},
                          "tooltip": {"mode": "multi"}}, **extra)


def stat(title, description, expr, unit="short", color="red"):
    return panel("stat", title, description, [target(expr, instant=True)], unit,
                 options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
                 fieldConfig={"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": [
                     {"color": "green", "value": None}, {"color": color, "value": 1}]}}, "overrides": []})


def table(title, description, targets, transformations=(), links=(), units=None):
    """units: column name -> Grafana unit, for the value columns (the panel default stays "short")."""
    p = panel("table", title, description, targets, options={"showHeader": True})
    p["transformations"] = list(transformations)
    if links:
        p["fieldConfig"]["overrides"].append({"matcher": {"id": "byName", "options": "rank"},
                                              "properties": [{"id": "links", "value": list(links)}]})
    for column, unit in (units or {}).items():
        p["fieldConfig"]["overrides"].append({"matcher": {"id": "byName", "options": column},
                                              "properties": [{"id": "unit", "value": unit}]})
    return p


def variables(with_pg_rank: bool = True) -> list[dict]:
    def query(name, label, q, multi=False):
        return {"type": "query", "name": name, "label": label, "datasource": DS, "refresh": 2, "sort": 1,
                "query": {"query": q, "refId": "StandardVariableQuery"}, "definition": q,
                "multi": multi, "includeAll": multi or name in ("namespace", "job"),
                "allValue": ".*", "current": {"selected": True, "text": "All", "value": "$__all"}}

    out = [{"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
            "current": {}, "hide": 0},
           query("namespace", "Namespace", "label_values(frexport_build_info, namespace)"),
           query("job", "Job", 'label_values(frexport_build_info{namespace=~"$namespace"}, job)')]
    if with_pg_rank:
        out += [query("pg", "Process group", f"label_values(frexport_pg_last_completed_collective{{{SEL}}}, pg)",
                      multi=True),
                query("rank", "Rank", f"label_values(frexport_rank_status{{{SEL}}}, rank)", multi=True)]
    return out


def dashboard(uid: str, title: str, description: str, layout: Layout, extra_vars: list[dict] = (),
              with_pg_rank: bool = True) -> dict:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["frexport", "pytorch"],
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"}, "timezone": "browser",
        "templating": {"list": variables(with_pg_rank) + list(extra_vars)},
        "annotations": {"list": []}, "panels": layout.panels,
        "links": [{"title": "frexport dashboards", "type": "dashboards", "tags": ["frexport"], "asDropdown": True}],
    }


def job_overview() -> dict:
    lay = Layout()
    lay.row("Is the job stuck, and who is the culprit?")
    for title, status, color, desc in [
        ("Stalled ranks", "stalled", "red", "Culprits: ranks holding up a collective their peers wait in"),
        ("Blocked ranks", "blocked", "orange", "Ranks waiting, directly or through other groups, for a stalled rank"),
        ("Desynced ranks", "desynced", "red", "Ranks that ran a different op, sizes or dtypes, or skipped one"),
        ("Straggling ranks", "straggling", "yellow", "Ranks that reach collectives consistently late"),
    ]:
        lay.add(stat(title, desc, f'count(frexport_rank_status{{{SEL}, status="{status}"}} == 1) or vector(0)',
                     color=color), 6, 4)
    jaeger = {"title": "Spans of this rank in Jaeger", "targetBlank": True,
              "url": '${jaeger_url}/search?service=${__data.fields.job}&tags=%7B%22pytorch.distributed.rank%22%3A'
                     '%22${__data.fields.rank}%22%2C%22error%22%3A%22true%22%7D'}
    lay.add(table(
        "Ranks that are not ok",
        "Status of every rank that is not ok, with the collective it holds up or waits in and for how long. "
        "The rank links to its spans in Jaeger.",
        [target(f'max by (namespace, job, rank, status) (frexport_rank_status{{{SEL_RANK}, status!="ok"}}) == 1',
                ref="A", instant=True, fmt="table"),
         target(f"max by (namespace, job, rank, pg, pg_desc, op, kind) (frexport_rank_stall_seconds{{{SEL_RANK}}})",
                ref="B", instant=True, fmt="table"),
         target(f"max by (namespace, job, rank, pg, pg_desc, op) "
                f"(frexport_oldest_pending_collective_age_seconds{{{SEL_RANK}}})", ref="C", instant=True, fmt="table")],
        transformations=[{"id": "merge", "options": {}},
                         {"id": "organize", "options": {"excludeByName": {"Time": True, "Value #A": True},
                                                        "renameByName": {"Value #B": "stalled for",
                                                                         "Value #C": "oldest pending"}}},
                         {"id": "filterByValue", "options": {"filters": [
                             {"fieldName": "status", "config": {"id": "isNotNull"}}], "type": "include",
                             "match": "all"}}],
        links=[jaeger], units={"stalled for": "s", "oldest pending": "s"}), 16, 9)
    lay.add(table("Firing frexport alerts", "Alerts from config/prometheus/frexport-rules.yaml that fire now",
                  [target(f'ALERTS{{alertname=~"Frexport.*", alertstate="firing", {SEL}}}', instant=True,
                          fmt="table")],
                  transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True,
                                                                                    "alertstate": True}}}]), 8, 9)
    lay.row("Progress per process group")
    lay.add(timeseries("Last completed collective per rank",
                       "collective_seq_id of each rank's newest finished collective, per group: a line that "
                       "stops rising is a rank that stopped",
                       [target(f"frexport_pg_last_completed_collective{{{SEL_PG}}}", "{{pg_desc}} rank {{rank}}")]),
                12, 9)
    lay.add(timeseries("Lag behind the group's newest collective",
                       "How many collectives each rank is behind the most advanced member of its group (0 when "
                       "healthy; a hang stops everyone, so look at the stall table too)",
                       [target(f"max by (namespace, job, pg) (frexport_pg_last_completed_collective{{{SEL}}}) "
                               f"- on (namespace, job, pg) group_right max by (namespace, job, pg, pg_desc, rank) "
                               f"(frexport_pg_last_completed_collective{{{SEL_PG}}})", "{{pg_desc}} rank {{rank}}")]),
                12, 9)
    lay.add(timeseries("Oldest pending collective",
                       "Age of each rank's oldest unfinished collective; compare with the group timeout",
                       [target(f"max by (rank, pg_desc, op) (frexport_oldest_pending_collective_age_seconds"
                               f"{{{SEL_PG}}})", "rank {{rank}} {{pg_desc}} {{op}}"),
                        target(f"max by (pg_desc) (frexport_pg_timeout_seconds{{{SEL_PG}}})", "timeout {{pg_desc}}",
                               ref="B")], unit="s"), 12, 8)
    links = "\n".join(f"- [{name}](${{runbook_base}}#{name.lower()})" for name in RUNBOOKS)
    lay.add(panel("text", "Runbooks", "What to do for each alert", [], options={
        "mode": "markdown", "content": "**When an alert fires:** open the evidence bundle, read the stalled "
                                       "rank's stack, run `frexport analyze` on the bundle.\n\n" + links}), 12, 8)
    extra = [{"type": "textbox", "name": "jaeger_url", "label": "Jaeger URL", "query": "http://jaeger-query:16686",
              "current": {"text": "http://jaeger-query:16686", "value": "http://jaeger-query:16686"}},
             {"type": "textbox", "name": "runbook_base", "label": "Runbooks",
              "query": "https://github.com/frexport/frexport/blob/main/docs/runbooks.md",
              "current": {"text": "https://github.com/frexport/frexport/blob/main/docs/runbooks.md",
                          "value": "https://github.com/frexport/frexport/blob/main/docs/runbooks.md"}}]
    return dashboard("frexport-job-overview", "Flight Recorder — job overview",
                     "Is the training job stuck, which rank is the culprit, which collective, since when.", lay, extra)


def collectives() -> dict:
    lay = Layout()
    lay.row("How long collectives take")
    lay.add(timeseries("Duration quantiles",
                       "p50 and p99 of collective durations by group and op (NCCL with TORCH_NCCL_ENABLE_TIMING; "
                       "gloo records no durations)",
                       [target(f"histogram_quantile({q}, sum by (le, pg_desc, op) (rate("
                               f"frexport_collective_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                               f"p{int(q * 100)} {{{{pg_desc}}}} {{{{op}}}}", ref=ref)
                        for q, ref in ((0.5, "A"), (0.99, "B"))], unit="s"), 12, 9)
    lay.add(panel("heatmap", "Duration heatmap", "All collectives' durations over time",
                  [target(f"sum by (le) (increase(frexport_collective_duration_seconds_bucket{{{SEL}}}"
                          f"[$__rate_interval]))", "{{le}}", fmt="heatmap")], "s",
                  options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1}), 12, 9)
    lay.row("How many")
    lay.add(timeseries("Collectives per second",
                       "Collectives finishing per second, by group, op and outcome (completed, retired, timed_out)",
                       [target(f"sum by (pg_desc, op, state) (rate(frexport_collectives_total{{{SEL}}}"
                               f"[$__rate_interval]))", "{{pg_desc}} {{op}} {{state}}")], unit="ops"), 12, 8)
    lay.add(timeseries("Pending collectives",
                       "Collectives enqueued and not finished, by group and op",
                       [target(f"sum by (pg_desc, op) (frexport_pending_collectives{{{SEL_PG}}})",
                               "{{pg_desc}} {{op}}")]), 12, 8)
    lay.row("Who is slow")
    lay.add(table("Slowest ranks now", "Ranks with the oldest unfinished collective",
                  [target(f"topk(10, max by (rank, pg_desc, op) (frexport_oldest_pending_collective_age_seconds"
                          f"{{{SEL_PG}}}))", instant=True, fmt="table")],
                  transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True},
                                                                  "renameByName": {"Value": "pending for"}}}],
                  units={"pending for": "s"}),
            12, 8)
    lay.add(table("Ranks most often straggling (last hour)", "Minutes each rank spent straggling in the last hour",
                  [target(f'sort_desc(sum by (rank) (count_over_time((frexport_rank_status{{{SEL_RANK}, '
                          f'status="straggling"}} == 1)[1h:1m])))', instant=True, fmt="table")],
                  transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True},
                                                                  "renameByName": {"Value": "time straggling"}}}],
                  units={"time straggling": "m"}), 12, 8)
    return dashboard("frexport-collectives", "Flight Recorder — collectives",
                     "Durations, rates and pending collectives per process group and op.", lay)


def health() -> dict:
    lay = Layout()
    lay.row("Is frexport reading every rank?")
    lay.add(stat("Sources down", "Sources whose last attempt failed (a refused socket: the rank's process is gone)",
                 f"count(frexport_source_up{{{SEL}}} == 0) or vector(0)"), 6, 4)
    lay.add(stat("Sidecars not scrapable", "frexport targets Prometheus cannot scrape",
                 f"count(up{{{SEL}}} == 0) or vector(0)"), 6, 4)
    lay.add(stat("Decode errors (1h)", "Dumps or bodies that could not be decoded in the last hour",
                 f"sum(increase(frexport_decode_errors_total{{{SEL}}}[1h])) or vector(0)", color="orange"), 6, 4)
    lay.add(stat("Dropped ring-buffer entries (1h)",
                 "Entries that left a ring buffer unseen: raise TORCH_FR_BUFFER_SIZE or poll more often",
                 f"sum(increase(frexport_ring_buffer_dropped_entries_total{{{SEL}}}[1h])) or vector(0)",
                 color="orange"), 6, 4)
    lay.add(timeseries("Sources up", "1 when the source's last attempt succeeded",
                       [target(f"frexport_source_up{{{SEL}}}", "{{pod}} {{source}}")]), 12, 8)
    lay.add(timeseries("Source scrape duration", "Time of each source's last attempt",
                       [target(f"frexport_source_scrape_duration_seconds{{{SEL}}}", "{{pod}} {{source}}")], "s"), 12, 8)
    lay.add(timeseries("Source errors", "Failed attempts per second by reason",
                       [target(f"sum by (source, reason) (rate(frexport_source_errors_total{{{SEL}}}"
                               f"[$__rate_interval]))", "{{source}} {{reason}}")], "ops"), 12, 8)
    lay.add(timeseries("Decode errors", "Undecodable dumps and bodies by reason",
                       [target(f"sum by (reason) (increase(frexport_decode_errors_total{{{SEL}}}[$__rate_interval]))",
                               "{{reason}}")]), 12, 8)
    lay.row("Exporter internals")
    lay.add(stat("Failing metrics collectors", "Collectors that raised in the last scrape (their metrics are "
                 "missing; the sidecar's log has the traceback)",
                 f"count(frexport_scrape_collector_success{{{SEL}}} == 0) or vector(0)"), 4, 8)
    lay.add(timeseries("Time to build a scrape", "frexport's own time to build /metrics, by collector",
                       [target(f"sum by (pod, collector) (frexport_scrape_collector_duration_seconds{{{SEL}}})",
                               "{{pod}} {{collector}}")], "s"), 8, 8)
    lay.add(timeseries("Evidence bundles", "Bundles written or failed (disk full, permissions)",
                       [target("sum by (result) "
                               f"(increase(frexport_evidence_bundles_total{{{SEL}}}[$__rate_interval]))",
                               "{{result}}")]), 6, 8)
    lay.add(timeseries("OTLP export",
                       "Spans exported, failed or dropped per second, and the export queue (only with traces on)",
                       [target(f"sum by (result) (rate(frexport_otlp_spans_total{{{SEL}}}[$__rate_interval]))",
                               "{{result}}"),
                        target(f"sum(frexport_otlp_queue_spans{{{SEL}}})", "queued", ref="B")]), 6, 8)
    return dashboard("frexport-health", "frexport — health", "Is frexport itself working?", lay, with_pg_rank=False)


DASHBOARDS = {"frexport-job-overview.json": job_overview, "frexport-collectives.json": collectives,
              "frexport-health.json": health}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    stale = []
    for name, build in DASHBOARDS.items():
        text, path = render(build), HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
