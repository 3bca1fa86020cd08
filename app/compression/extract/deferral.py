"""Deferred decisions: what the user leaves open, waiting on someone or on later.

A deferral is pending — it awaits someone (the user, a spouse, a manager, an
approver) — however indirectly it is phrased: "park the X for now", "I'll circle
back once I've talked to…", "hold off on X until Y agrees", "let me sleep on
it", "X 先挂着", "等张经理点头了再说", "我还得跟家里商量一下". The whole
sentence is kept, so the thing left open and whom it waits on stay together.

Every pattern is an alternation of fixed phrases with bounded gaps (``.{0,n}``):
linear in the sentence length.
"""

from __future__ import annotations

import re

from app.compression.extract.gates import Gated
from app.compression.extract.patterns import literal_hint
from app.compression.state import PendingUnit
from app.compression.text import clip

_I = re.IGNORECASE

# Putting a decision off: "park", "hold off on", "sleep on", "leave … open".
_EN_PUT_OFF = (
    r"\b(?:park|shelve|table)\b.{0,40}\b(?:for now|for the moment|until|till)\b"
    r"|\bhold (?:off|fire)\b|\bput\b.{0,30}\bon hold\b|\bon hold\b"
    r"|\bsleep on\b|\bmull (?:it |this |that )?over\b|\bthink (?:it |this |that )?over\b"
    # "let me think about it", "I'll consider the offer", "we need to reflect on it"
    r"|\b(?:let me|let us|let'?s|i'?ll|i will|i need to|i'?d like to|i want to|i have to|we'?ll"
    r"|we need to)\s+(?:think|consider|reflect|ponder)\b"
    r"|\bon the fence\b|\bput a pin in\b|\bcan wait\b|\b(?:will|can|should) have to wait\b"
    r"|\bleave\b.{0,40}\b(?:open|undecided|for later|out for now|aside for now)\b"
    r"|\b(?:keep|stays?|remain)\b.{0,30}\b(?:open|undecided|pending)\b"
    r"|\bnot (?:ready|able) to (?:commit|decide|confirm)\b|\bhaven'?t (?:decided|made up my mind)\b"
    r"|\bnot (?:decided|sure|settled) yet\b|\bundecided\b|\bTBD\b|\bto be (?:decided|confirmed)\b"
    r"|\b(?:don'?t|do not) (?:lock|book|commit|submit|finali[sz]e)\b.{0,30}\byet\b"
    # "hold that thought", "maybe later", "we'll see", "give me a day to think"
    r"|\bhold that thought\b|^(?:maybe|perhaps) (?:later|another time|next time)\b"
    r"|\bwait and see\b|^(?:well,? )?(?:we'?ll|i'?ll) see\W*$"
    r"|\bgive me\b.{0,20}\bto (?:think|decide|check|consider|look)\b"
    r"|\bgive me (?:a|one) (?:sec|second|minute|moment)\b"
)
# Coming back to it: "get back to you on", "circle back", "let you know tomorrow".
_EN_LATER = (
    r"\b(?:get|come) back to you\b|\bcircle back\b|\bfollow up (?:on|about) (?:it|this|that)\b"
    r"|\blet you know\b.{0,30}\b(?:later|tomorrow|tonight|next week|once|when|after)\b"
    r"|\b(?:decide|confirm|tell you|answer)\b.{0,20}\b(?:later|tomorrow|tonight|next week"
    r"|this (?:evening|afternoon|weekend)|over the weekend|in the morning|by (?:the end of|mon"
    r"|tues|wednes|thurs|fri|satur|sun)|after (?:lunch|dinner|work|the weekend|the meeting"
    r"|the call))\b"
    r"|\b(?:ask|remind) me\b.{0,12}\b(?:later|tomorrow|tonight|next week|in a bit)\b"
)
# Waiting on someone: "until Priya agrees", "once you find out what X thinks",
# "my husband still needs to weigh in", "I need to run it by my boss".
_EN_WAITING = (
    r"\b(?:until|till|once|after|when)\b.{0,40}\b(?:agrees?|approves?|signs? off|confirms?"
    r"|decides?|weighs? in|gets back|hear back|says? (?:yes|ok|so)|thinks|okays?|gives? the go)\b"
    r"|\b(?:needs?|has|have|want) to (?:weigh in|sign off|approve|check with|run it by|talk to"
    r"|ask|consult|hear from)\b|\bstill (?:needs to|has to|got to|must) (?:weigh in|decide"
    r"|approve|sign off|look|check)\b"
    r"|\brun (?:it|this|that) by\b|\b(?:check with|talk (?:it )?over with|ask)\b.{0,30}\b(?:first"
    r"|before)\b|\bwaiting (?:for|on)\b|\bawaiting\b|\bpending (?:approval|sign-?off|review)\b"
    r"|\b(?:ping|message|text|call|email|get back to|tell) you\b.{0,20}\b(?:after|once|when"
    r"|as soon as)\b"
    r"|\b(?:replies|responds|gets back to (?:me|us)|has a say|wants? a say|signs off)\b"
    # "get my wife's opinion first", "I need our CFO's sign-off"
    r"|\b(?:get|need|want|have to hear)\s+(?:my|our|his|her|their)\b.{0,30}(?:\b(?:opinion"
    r"|take on|input|thoughts|approval|sign-?off|go-ahead|blessing)|'s (?:ok|okay))\b"
)
# Consulting someone before answering: "let me ask my supervisor", "I'll check the
# dates with my wife first", "I need to confirm with our lead", "let me see what Sam
# thinks". Only the speaker's own plan ("I'll…", "let me…"): "check it with the hotel"
# is a request to the agent, and "ask" needs a third party, not "ask you"/"ask about".
_EN_FIRST_PERSON = (
    r"\b(?:i'?ll|i will|i'?m going to|i'?m gonna|let me|i need to|i have to|i must|i should"
    r"|i'?d better|i want to|i'?d like to|we'?ll|we need to|let us|let'?s)\s+"
    r"(?:(?:first|quickly|just|go|still|also)\s+)?"
)
_EN_CONSULT = (
    _EN_FIRST_PERSON + r"(?:ask(?!\s+(?:you|a|an|another|one|some|something|about|for|if"
    r"|whether|why|how|what|when|where|which|who|this|that|it|again|questions?)\b)\s+\w"
    r"|(?:check|confirm|verify|double-check|clear (?:it|this|that)|talk|speak|consult)"
    r"\s+(?:with|to)\b|consult\b|run (?:it|this|that) (?:by|past)\b|find out from\b"
    r"|see what\b.{0,40}\b(?:says?|thinks?)\b|find out\b"
    # the speaker's own calendar or budget first: "let me check my calendar"
    r"|(?:check|double-check|look at|consult|go over)\s+(?:my|our)\s+(?:calendar|schedule"
    r"|diary|agenda|budget|finances|availability)\b"
    r"|(?:check|double-check|look (?:at|into)|review|go over)\b.{0,40}\bfirst\b"
    r"|(?:check|confirm|verify|double-check|clear|discuss|sort out)\b.{0,40}"
    r"\bwith (?:my|our|his|her|their)\b)"
)
# Chinese: 先挂着/先不定/先留着/先放一放, 再考虑/再想想, 回头再说, 拿不准, 得…拍板/点头,
# 等…确认了再…, 得跟…商量, 得听听…的意见, 明天给你答复.
_ZH = (
    r"先(?:挂着|放着|放一放|搁着|搁一搁|留着|空着|不定|别定|不动|别动|不急|别急|缓缓|缓一缓|等等|不提交|别提交)"
    r"|缓一缓|缓一下|有消息(?:了)?(?:我|再|就)|回头[^。！!？?]{0,12}?(?:说|定|决定|确认|告诉|答复|看|碰|商量|聊)"
    r"|(?:再|还得)(?:考虑|想想|想一想|斟酌|琢磨|看看|商量|合计)"
    r"|改天再|过两天再|晚点(?:再)?(?:说|定|告诉|确认)"
    r"|(?:明天|后天|下周|晚上|稍后|之后|过两天|过几天|改天|晚点|回头)(?:再)?(?:给你|告诉你|回复|答复"
    r"|确认|定|通知你)"
    # 看看再说, 以后再说吧, 商量后再答复你, 等我通知
    r"|(?:看看|想想|研究研究|商量商量|等等|过几天|下次|以后|到时候)再说|(?<![你您])再说(?:吧|啦|好了)?[。！!]?$"
    r"|(?:后|之后|以后|完)[^。！？!?，,]{0,4}?再(?:答复|回复|决定|定|说|告诉你|给你|确认)|等我(?:的)?(?:通知|消息|回复|电话|回话)"
    # 让我想想, 容我考虑考虑, 我考虑一下
    r"|(?:让我|容我|我|先)(?:再|好好)?(?:想想|想一想|想一下|考虑一下|考虑考虑|琢磨一下|琢磨琢磨"
    r"|斟酌一下|斟酌斟酌)(?!办法)"
    r"|拿不准|没想好|还没(?:想好|定|决定|确定|拿定主意)|暂(?:时)?不(?:定|决定|确定|提交)|待定|未定"
    r"|等.{1,20}?(?:点头|拍板|同意|确认|批准|答复|回复|决定|看过|看完|签字|定下来|审批|意见)"
    r"|(?:得|要|需要|还得)(?:我|他|她|我们)?(?:(?:跟|和|同)(?![你您])|问问|请示|听听).{0,20}?(?:商量|意见|确认|拍板|同意|看看)"
    r"|(?:得|要|由|归)(?:我|他|她)?.{0,12}?(?:拍板|点头|说了算|做主)"
    r"|(?:还在|正在)(?:看|考虑|比较|等)"
)
# 先问问主管, 我问一下组长, 我明天跟负责人确认一下, 我得先和家里商量: the speaker consults
# someone first. Not "帮我跟酒店确认" or "你先问问" (asks the agent to), not "跟你确认"
# (settled here), not "商量好了/确认过了" (already done).
_ZH_CONSULT = (
    r"(?<![帮替给让请你您])(?:我|先|得|要|会|去|再|回头|明天|后天|晚点|下周|今晚|待会|等会)"
    r"(?:先|去|再)?(?:问问|问一下|问下|问一问|请示(?:一下)?|打听(?:一下)?)(?![你您，,。.？?！!])"
    # the speaker's own schedule or budget first: 我先查一下我的日程
    r"|(?<![帮替给让请你您])(?:我|先|得)(?:先|得|要)?(?:看一下|看看|查一下|查查|核对一下|翻一下)"
    r"(?:我的|自己的|我们的)?(?:日程|日历|行程|安排|预算|排期|排班|余额)"
    r"|(?<![帮替给让请你您])(?:我|先|得|要|会|回头|明天|后天|晚点|下周|今晚|待会|等会|还得|需要)"
    r"[^。！？!?，,]{0,6}?(?:跟|和|同|找)(?![你您])[^。！？!?]{1,15}?"
    r"(?:确认|商量|沟通|核实|核对|对一下|碰一下|讨论|请示|打听|合计)(?![好过了完])"
)

DEFERRAL = re.compile(
    "|".join((_EN_PUT_OFF, _EN_LATER, _EN_WAITING, _EN_CONSULT, _ZH, _ZH_CONSULT)), _I
)
# Asking to put it off is a deferral too ("can we leave X open?"); asking whether to
# consult someone ("shall I check with the airline first?") is only a question.
_PUT_OFF = re.compile("|".join((_EN_PUT_OFF, _ZH)), _I)
# A literal word each alternative above cannot match without (searched in the
# lower-cased sentence first): most sentences defer nothing, and the bounded gaps
# after common words ("until", "when") made the full pattern a tenth of the cost
# of a slice of plain speech.
HINT_DEFERRAL = literal_hint(
    # putting it off
    "park|shelve|table|hold|sleep on|mull|think|consider|reflect|ponder|fence|pin in|wait"
    "|leave|open|undecided"
    "|pending|not ready|not able|haven|yet|tbd|to be "
    # coming back to it
    "|back to you|circle back|follow up|let you know|later|tomorrow|tonight|next week"
    # waiting on someone
    "|agree|approve|sign|confirm|decide|weigh|gets back|hear back|say|thinks|okay|give"
    "|check with|run it by|talk to|ask|consult|hear from|still|run |first|before"
    "|ping you|message you|text you|call you|email you|get back to you|tell you"
    "|repl|respond|a say"
    # consulting someone
    "|check with|check to|verify with|verify to|clear it|clear this|clear that|talk to"
    "|talk with|speak to|speak with|with my|with our|with his|with her|with their"
    "|see what|find out|calendar|schedule|diary|agenda|budget|finances|availability"
    # putting it off, coming back at a stated time
    "|hold that|maybe later|maybe another|maybe next|perhaps later|perhaps another"
    "|perhaps next|wait and see|'ll see|give me|remind me|ask me|weekend|morning|evening"
    "|afternoon|after lunch|after dinner|after work|after the|by the end|by mon|by tues"
    "|by wednes|by thurs|by fri|by satur|by sun"
    # someone's say
    "|opinion|take on|input|thoughts|approval|'s ok|blessing|go-ahead"
    # Chinese
    "|先|缓|有消息|回头|再|还得|改天|过两天|晚点|明天|后天|下周|晚上|稍后|之后|拿不准|没想好"
    "|还没|暂|待定|未定|还在|正在|点头|拍板|同意|确认|批准|答复|回复|决定|看过|看完|签字"
    "|定下来|审批|意见|商量|看看|说了算|做主"
    "|问问|问一|请示|打听|沟通|核实|核对|对一下|碰一下|讨论|合计"
    "|问下|再说|后再|完再|等我|想想|想一|考虑一|考虑考|琢磨|斟酌|看一下|查一下|查查|翻一下"
    "|过几天|改天|通知你"
)
# The two asked only of their alternatives that can match (``gates``): a sentence
# that passes the hint above still holds the words of few of them.
_DEFERRAL_GATED = Gated(DEFERRAL, HINT_DEFERRAL)
_PUT_OFF_GATED = Gated(_PUT_OFF, HINT_DEFERRAL)
# A deferral asked about is a question, not a deferral ("should we wait for Priya?").
_QUESTION = re.compile(r"[?？]\s*$")
TEXT_CHARS = 240


def is_deferral(sentence: str) -> bool:
    if _QUESTION.search(sentence) is not None:
        return _PUT_OFF_GATED.matches(sentence)
    return _DEFERRAL_GATED.matches(sentence)


# The words of putting something off, and nothing else: what a sentence has beyond
# them names the thing put off ("shelve the printer order", "等老王点头").
_PUT_OFF_WORDS = frozenset(
    "maybe perhaps later another time next wait think about that this hold thought remind"
    " tomorrow tonight again give minute moment second decide sure okay well week weekend"
    " back over first then with through know circle rather".split()
)
_LATIN = re.compile(r"[a-z]{4,}")
_ZH_PUT_OFF_WORDS = re.compile(
    "以后|改天|回头|下次|明天|后天|下周|晚点|过两天|过几天|到时候|稍后|之后|再说|等我|消息|通知|看看|想想"
    "|想一想|想一下|考虑|斟酌|琢磨|一下|等等|稍等|这样|[先再我吧呢啊嗯哦呀嘛了的行好吗]"
)
_CJK = re.compile(r"[\u4e00-\u9fff]")


def is_bare(sentence: str) -> bool:
    """A deferral that names nothing of its own: "maybe later", "we'll see", "改天再说吧".

    Said in reply to a question it holds that question open; said after a remark it
    leaves nothing for anyone to await. "Shelve the bookcase order for now" and "这个我再想想"
    name something.
    """
    text = sentence.lower()
    if any(w not in _PUT_OFF_WORDS for w in _LATIN.findall(text)):
        return False
    return len(_CJK.findall(_ZH_PUT_OFF_WORDS.sub("", text))) <= 1


def deferral(sentence: str, seq: int) -> PendingUnit | None:
    """A pending item for a decision the speaker leaves open, or None."""
    if not is_deferral(sentence):
        return None
    return PendingUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq])
