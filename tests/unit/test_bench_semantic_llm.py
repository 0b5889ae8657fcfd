"""bench.semantic_llm's reader is the reducer role as the reducer stage calls it: the playbook as the call's context,
an unparseable answer counted and retried, a call that fails for good replaced by the union of its children."""

from bench.semantic_llm import CallLog, LLMReader
from combee_core.llm.config import LLMConfig, RoleConfig
from combee_core.llm.prompts import read_data_block
from combee_core.llm.roles import LLMReply, LLMRequest, LLMRoles
from combee_core.models import AddOp
from combee_core.playbook import Playbook
from combee_core.playbook.operations import apply_operations


def _roles(answers: list[str], asked: list[LLMRequest], log: CallLog) -> LLMRoles:
    async def answer(request: LLMRequest) -> LLMReply:
        asked.append(request)
        return LLMReply(text=answers.pop(0))

    config = LLMConfig(reducer=RoleConfig(model="openai/stand-in", max_retries=1, backoff_s=0.0))
    return LLMRoles(config, on_call=log, responder=answer)


async def test_the_reader_sends_the_playbook_and_counts_an_unparsed_answer_before_the_good_one():
    asked: list[LLMRequest] = []
    log = CallLog()
    merged = '{"operations": [{"op": "ADD", "section": "rules", "content": "Quote every variable.", "support": 2}]}'
    reader = LLMReader(_roles(["I think they are the same lesson.", merged], asked, log), 4000)
    seed = AddOp(section="rules", content="Pin the random seed.")
    reader.playbook = apply_operations(Playbook.empty("bench"), [seed], 1).playbook
    outcome = await reader.reduce([[AddOp(section="rules", content="Quote every variable.")],
                                   [AddOp(section="rules", content="Always quote shell variables.")]])
    assert [op.content for op in outcome.operations] == ["Quote every variable."]
    assert "Pin the random seed." in read_data_block(asked[0].messages)["playbook"]
    summary = log.summary()
    assert (summary["attempts"], summary["attempts_unparsed"], summary["attempts_ok"]) == (2, 1, 1)
    assert reader.summary()["calls"] == 1 and reader.summary()["failed_calls"] == 0 and reader.adds_read == 2


async def test_a_call_that_never_parses_is_replaced_by_the_union_of_its_children():
    log = CallLog()
    reader = LLMReader(_roles(["no", "still no"], [], log), 4000)
    children = [[AddOp(section="rules", content="A.")], [AddOp(section="rules", content="B.")]]
    outcome = await reader.reduce(children)
    assert outcome.operations == [op for child in children for op in child]
    assert reader.failed_calls == 1 and log.summary()["attempts_unparsed"] == 2
