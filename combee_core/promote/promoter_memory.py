"""What a live promoter keeps of what its views read, so that its memory does not grow with the stream's age by
what it no longer reads: the rules, and why a run decides and requests exactly as a promoter that keeps everything
(``Promoter(keep_everything=True)``; ``tests/unit/test_promoter_pruning.py``).

- **Results** (``eval-results``, the dominant cost: one ``EvalResult`` per content and held-out task): once a
  content has a result of every held-out task, its results are replaced by its score, the ``(mean, error, models)``
  that ``ScoreCache.score`` answers (:func:`summarise_complete`, on the result that completes it). Exact: the first
  result of each pair counts and is never replaced, so that score is final; ``missing`` answers no task, ``score``
  the same tuple, and a later result of those pairs is a repeat, as before. A playbook's held-out set is fixed per
  promoter process (resolved once); a content is summarised over the set of the first playbook whose results
  complete it (a content two playbooks share keeps its other results).
  A content still incomplete keeps its results (they are needed to score it once the rest arrives), whether it is
  needed (``needed_digests``) or not (a rejected-unevaluated candidate's, a stray result's). A summary is kept for
  good: any later candidate may repeat any content (an empty batch on a rejected version, an edit undone), and is
  then scored from it without a new request; it is a few hundred bytes, against a content's results.
- **Requests sent** (once per process and content): forgotten when the content is summarised, since none of its
  tasks can be missing again.
- **Costs and reflection usage**: after each decision that counts, the versions below ``floors(...).version`` (but
  the newest read, which ``floors`` reads its batch floor from) and the batches below ``floors(...).batch``
  (:func:`prune_below_floors`). Exact in a run without operator actions: the served version ``F`` and the newest
  decided candidate ``D`` only rise (a promotion serves a newer candidate, a canary's rejection and the
  unevaluated rejection of a candidate built on it keep ``F``), so a later decision's costs, the versions after
  ``F`` up to its candidate, are all at or above ``min(F, D) + 1``, and their batches at or above the batch floor
  (batch ids grow with versions). An operator's ``combee rollback`` / ``combee promote`` to a version below the
  floor moves ``F`` below it: the next promotion's improvement cost then counts only the candidates still kept (those
  from the floor of the decision before on, and the newest read then), as a restarted promoter's counts only those
  it read (``promoter_resume``'s docstring); the decision is otherwise the same (``decision_on`` is kept, the
  version's results are summarised). A floor that would cover any version an operator can serve is 0: exactness
  there would mean keeping every cost, and it is the one field of one decision.
- **Kept whole**: the ledger (``promoted``: the decisions ``decision_on`` and ``last_decided`` look up), the
  candidates (already dropped once decided) and ``digests`` (one per version: what tells a decided content, for
  ``droppable_digests`` and the ``eval-results`` resume; an unknown digest would pin the resume offset).
"""

from __future__ import annotations

from itertools import takewhile

from combee_core.models import EvalResult
from combee_core.promote.promoter_resume import PromoterState, floors


def summarise_complete(promoter: PromoterState, result: EvalResult) -> None:
    """Keep only the score of a content once every task of its playbook's held-out set has its result."""
    held_out = promoter.held_out.get(result.playbook_id)
    if held_out is not None and promoter.cache.summarise(result.digest, held_out[1]):
        promoter.forget_requests(result.digest)


def prune_below_floors(promoter: PromoterState, playbook_id: str) -> None:
    """Drop the playbook's costs and reflection usage below its floors. Both are read in number order (the gates
    accept contiguous numbers), so the dropped ones are at the front: amortised O(1)."""
    floor = floors(promoter, playbook_id)
    costs = promoter.costs.get(playbook_id, {})
    newest = next(reversed(costs), None)
    old_costs = [v for v in takewhile(lambda v: v < floor.version, costs) if v != newest]
    for version in old_costs:
        del costs[version]
    usage = promoter.reflection_usage.get(playbook_id, {})
    old_usage = list(takewhile(lambda batch_id: batch_id < floor.batch, usage))
    for batch_id in old_usage:
        del usage[batch_id]
