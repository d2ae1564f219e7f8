"""Which collectives' spans are sent: the standard OTEL_TRACES_SAMPLER, decided per trace.

A busy rank finishes hundreds of collectives a second, and each span costs the sidecar ~115-125 µs to
map, encode and send (docs/traces.md, "Sampling, and what spans cost"): 8 such ranks, every span sent,
take about half a core. OTEL_TRACES_SAMPLER=traceidratio (or parentbased_traceidratio: these spans have
no parent) with OTEL_TRACES_SAMPLER_ARG=0.01 sends one collective in a hundred. The decision is the SDK's
ratio rule on the span's trace id, which every rank's sidecar derives alike from the collective
(spans.trace_id_for): a collective is sent from all its ranks or from none, and after a restart as before.

Errors are sent whatever the sampler says (the caller asks only for the others): a timed-out entry, an
entry a finding names, and the stall spans. They are what the traces are for.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, TraceIdRatioBased

from frexport.export.otlp.exporter import otel_number

# the SDK's names (opentelemetry.sdk.trace.sampling); a sampler of a package's entry point is not read
SAMPLERS = ("always_on", "always_off", "traceidratio",
            "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio")


class TraceSampling:
    """Whether a collective's spans are sent, by its trace id. `sampler`: always on, always off or a
    trace-id ratio (these spans have no parent: a parent-based sampler is its root). Where it sends all
    traces or none, nothing is asked (a trace id is a hash: not made where there is nothing to decide);
    else the ratio sampler's rule on its bound (`TraceIdRatioBased.bound`): its `should_sample` made
    a result object per span, which cost the sidecar more than the rule."""

    def __init__(self, sampler: Sampler) -> None:
        self.keeps_all = sampler is ALWAYS_ON
        self.bound = sampler.bound if isinstance(sampler, TraceIdRatioBased) else None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TraceSampling:
        """The sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name (the SDK's default,
        parentbased_always_on, where unset); ValueError for a name or ratio it would not take (the SDK
        would fall back to sending everything, and say so only in a log line)."""
        name = (env.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip().lower()
        if name not in SAMPLERS:
            raise ValueError(f"OTEL_TRACES_SAMPLER={name[:60]!r}: use one of {', '.join(SAMPLERS)}")
        if name.endswith("traceidratio"):
            root: Sampler = TraceIdRatioBased(otel_number(env, "OTEL_TRACES_SAMPLER_ARG", "1.0", 1.0,
                                                          "a ratio from 0 to 1 (0.01: one collective in a hundred)"))
        else:
            root = ALWAYS_ON if name.endswith("always_on") else ALWAYS_OFF
        return cls(root)

    def keeps(self, trace_id: int | None) -> bool:
        """`trace_id`: None where `bound` is (not made)."""
        if trace_id is None or self.bound is None:
            return self.keeps_all
        return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self.bound
