"""Scopes on a real broker: two tenants and their shared parent, traces interleaved on one traces topic. No trace of
one tenant enters a batch, a shuffled copy, a partial or a lineage of another; the composed served view gives the
parent's entries to both tenants."""

from __future__ import annotations

import pytest

from combee_core.models import PartialUpdate, ShuffledReflection
from combee_core.scopes import parse_parents, served_view
from combee_core.topology import Topic
from streams.topology.pipeline import InProcessPipeline, read_models
from streams.topology.produce import produce_traces
from tests.integration.topology_support import make_traces, run_settings

pytestmark = [pytest.mark.integration]

TENANTS = ("tenant-a", "tenant-b", "shared")


async def test_interleaved_tenants_never_mix_and_the_shared_parent_reaches_both(kafka, unique_prefix):
    settings = run_settings(unique_prefix, batch_size=20, playbook_parents="tenant-a=shared,tenant-b=shared")
    streams = {tenant: [t.model_copy(update={"trace_id": f"{tenant}-{t.trace_id}"})
                        for t in make_traces(40, tenant, seed=n)] for n, tenant in enumerate(TENANTS)}
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
        assert inherited == list(latest["shared"]) and own == list(latest[tenant])
        assert [item.scope for item in view.entries] == [tenant] * len(own) + ["shared"] * len(inherited)
        assert not any(item.scope == ({"tenant-a", "tenant-b"} - {tenant}).pop() for item in view.entries)
    assert served_view("shared", latest, parents).scopes == ("shared",)  # a parent is not served its children
