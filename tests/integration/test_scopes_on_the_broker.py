"""Scopes on a real broker: two tenants and their shared parent, traces interleaved on one traces topic. No trace of
one tenant enters a batch, a shuffled copy, a partial or a lineage of another; the composed served view gives the
parent's entries to both tenants."""

from __future__ import annotations

import pytest

from combee_core.models import PartialUpdate, ShuffledReflection
from combee_core.serve.scopes import parse_parents, served_view
from combee_core.sim.task_suite import build_suite, train_traces
from combee_core.topology import Topic
from streams.runs.playbook_io import lift_to_parent
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import produce_traces
from tests.integration.topology_support import run_settings

pytestmark = [pytest.mark.integration]

TENANTS = ("tenant-a", "tenant-b", "shared")


def versions_of(versions, playbook_id):
    return [v for v in versions if v.playbook_id == playbook_id]


async def test_interleaved_tenants_never_mix_and_the_shared_parent_reaches_both(kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=20, playbook_parents="tenant-a=shared,tenant-b=shared")
    suites = {"tenant-a": build_suite(seed=7), "tenant-b": build_suite(seed=7), "shared": build_suite(seed=11)}
    streams = {tenant: [t.model_copy(update={"trace_id": f"{tenant}-{t.trace_id}"})
                        for t in train_traces(suites[tenant], 40, playbook_ids=(tenant,), run_seed=n, agents=40)]
               for n, tenant in enumerate(TENANTS)}
    owner = {t.trace_id: tenant for tenant, traces in streams.items() for t in traces}
    interleaved = [t for triple in zip(*streams.values(), strict=True) for t in triple]
    assert len({t.playbook_id for t in interleaved[:3]}) == 3  # each run of three holds every tenant
    async with InProcessPipeline(settings, kafka.bootstrap, kafka.profile) as run:
        await produce_traces(settings, kafka.bootstrap, kafka.profile, interleaved)
        versions = await run.wait_for(
            lambda vs: all(sum(len(v.lineage) for v in vs if v.playbook_id == t) == 40 for t in TENANTS),
            timeout_s=180, what="every trace of every tenant in a version")
        manifests = await run.manifests()
        shuffled = await read_models(run, Topic.SHUFFLE, ShuffledReflection)
        partials = await read_models(run, Topic.PARTIALS, PartialUpdate)

    assert {m.playbook_id for m in manifests} == set(TENANTS)
    for manifest in manifests:
        assert {owner[t] for t in manifest.trace_ids} == {manifest.playbook_id}
    for version in versions:
        assert {owner[t] for t in version.lineage} == {version.playbook_id}
    for copy in shuffled:
        assert owner[copy.reflection.trace_id] == copy.playbook_id
    for partial in partials:
        assert {owner[t] for t in partial.trace_ids} <= {partial.playbook_id}
    assert sorted(t for v in versions for t in v.lineage) == sorted(owner)

    latest = {tenant: [v for v in versions if v.playbook_id == tenant][-1].entries for tenant in TENANTS}
    assert latest["shared"], "the parent learned entries of its own"
    parents = parse_parents(settings.playbook_parents)
    for tenant in ("tenant-a", "tenant-b"):
        view = served_view(tenant, latest, parents)
        inherited = [item.entry for item in view.entries if item.scope == "shared"]
        own = [item.entry for item in view.entries if item.scope == tenant]
        assert inherited and own == list(latest[tenant])
        # every parent entry is served, unless the tenant holds the same lesson (then it is not repeated)
        assert sorted([f"shared/{e.entry_id}" for e in inherited] + list(view.shadowed)) == sorted(
            f"shared/{e.entry_id}" for e in latest["shared"])
        assert [item.scope for item in view.entries] == [tenant] * len(own) + ["shared"] * len(inherited)
        assert not any(item.scope == ({"tenant-a", "tenant-b"} - {tenant}).pop() for item in view.entries)
    assert served_view("shared", latest, parents).scopes == ("shared",)  # a parent is not served its children

    # A lesson of tenant-a proposed up to the parent: the parent's next version holds it once; tenant-b is served
    # it, tenant-a's view does not repeat it.
    lesson = next(e for e in latest["tenant-a"] if e.content not in {p.content for p in latest["shared"]})
    result = await lift_to_parent(settings, kafka.bootstrap, kafka.profile, "tenant-a", "shared", [lesson.entry_id])
    lifted = result.seeded.version
    assert lifted.version == versions_of(versions, "shared")[-1].version + 1
    (copy,) = [e for e in lifted.entries if e.content == lesson.content]
    latest["shared"] = lifted.entries
    assert lesson.content in served_view("tenant-b", latest, parents).text
    view_a = served_view("tenant-a", latest, parents)
    assert view_a.text.count(lesson.content) == 1 and f"shared/{copy.entry_id}" in view_a.shadowed
