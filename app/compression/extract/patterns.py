"""Compiled cue patterns for the rule extractor, Chinese and English side by side.

All patterns are compiled once at import: extraction runs on every compression
and must stay well under the 100 ms budget for a 16k-token history. Each family
is a ``(zh | en)`` alternation applied to one sentence; the families are tried
in the order ``rules.py`` documents, so a sentence lands in the family that
explains it best.
"""

from __future__ import annotations

import re

from app.compression.extract.gates import Gated, Trie, trie

_I = re.IGNORECASE

# --------------------------------------------------------------- sentences, noise
# A full stop ends a sentence unless it ends a title or an abbreviation that a
# name, a number or more words follow ("Dr. Ng", "approx. 40", "e.g. Lisbon").
# One fixed-width lookbehind each: only tried where a "." is followed by a space.
_ABBREVIATIONS = (
    "Dr Mr Mrs Ms Mx Prof Sr Jr St Mt Ft Gen Col Capt Lt Sgt Rev Hon Gov Sen Rep Pres"
    " vs approx Inc Ltd Co Corp Dept Fig Vol Ave Blvd Rd Apt Ste Jan Feb Mar Apr Jun Jul"
    " Aug Sep Sept Oct Nov Dec e.g i.e a.k.a cf ca"
).split()
_NOT_AFTER_ABBREVIATION = "".join(rf"(?<!\b{re.escape(a)}\.)" for a in _ABBREVIATIONS)
SENTENCE_SPLIT = re.compile(
    rf"(?<=[。！？!?；;])\s*|\n+|(?<=[.]){_NOT_AFTER_ABBREVIATION}\s+(?=\S)"
)
BULLET_START = frozenset("-*•·>（(0123456789")  # and whitespace
BULLET = re.compile(r"^\s*(?:[-*•·>]+|\d{1,2}[.)、]|[（(]?\d{1,2}[）)])\s*")
# Leading politeness that hides the cue ("OK, never book…", "好的，另外千万…").
LEADING_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|sure|yes|yeah|great|thanks|thank you|well|so|oh|hmm|btw|by the way|"
    r"好的?|嗯+|哦+|那么?)[\s,，!！.。:：~～]+|(?:对了|另外|此外|顺便说一下)[\s,，:：]*)+",
    _I,
)
NOISE = re.compile(
    r"^(?:thanks?(?: you)?(?: (?:so|very) much)?|thx|ty|ok(?:ay)?|k|cool|great|nice|awesome|"
    r"perfect|got it|sounds good|lol|lmao|rofl|ha(?:ha)+|he(?:he)+|hi|hello|hey(?: there)?|"
    r"good (?:morning|afternoon|evening|night)|bye|see you|cheers|np|no problem|no worries|"
    r"you'?re welcome|sure|yes|yeah|yep|no|nope|wow|hmm+|um+|great,? thanks|"
    r"好的?|好滴|好嘞|嗯+|哦+|噢+|哈+|呵+|谢谢(?:你|您|啦)?|多谢|感谢|辛苦了?|收到|明白了?|了解|"
    r"可以|行|没问题|不客气|再见|拜拜|你好|您好|早上好|晚上好|晚安|在吗|太好了|棒|厉害)"
    r"[\s!！.。~～,，?？😀😂👍🙏:)D]*$",
    _I,
)
CHITCHAT = re.compile(
    r"how(?:'s| is) the weather|what(?:'s| is) the weather (?:like )?(?:today|there|outside)?$"
    r"|how are you|how(?:'s| is) it going|what'?s up\b"
    # asking after the user's day or holiday: "how was your weekend?", "did you have a
    # nice trip?", "周末过得怎么样？"
    r"|how was your (?:day|weekend|holiday|vacation|evening|morning|week|break)"
    r"|(?:\bdid you have|^have) a (?:good|nice|great|lovely) (?:day|weekend|holiday|vacation"
    r"|evening|week|break)\b"
    r"|(?:周末|今天|假期|最近|昨天|这几天|这周|节日|放假|春节|国庆)过得(?:怎么样|如何|好吗|还好吗|开心吗|咋样)"
    r"|tell me a joke|you'?re (?:funny|the best|awesome)|nice weather|it'?s (?:sunny|raining)"
    r"|天气(?:怎么样|如何|真好|不错)|今天天气|你好吗|最近怎么样|讲个笑话|你真(?:棒|好|聪明)|吃了吗|哈哈",
    _I,
)
SOCIAL = re.compile(
    r"(?i:\b(?:haha+|hehe+|lol|lmao|rofl|omg|ugh|yay|brb|can'?t wait"
    r"|so (?:annoying|tired|excited|fun|boring)|what a (?:finish|game|day|week)"
    r"|the (?:flat|house|place) is a mess|just kidding|spent like)\b"
    r"|\bmy (?:cat|dog|kid|kids|son|daughter|sister|brother|mum|mom|dad|wife|husband|partner"
    r"|neighbou?r|friend|family"
    # relatives and housemates: their visits and plans are the user's private life
    r"|parents|folks|cousins?|uncle|aunt|grand(?:ma|pa|mother|father|parents|kids?)|in-laws"
    r"|nephew|niece|roommate|flatmate|housemate)\b"
    r"|\b(?:kitchen|house|flat|apartment|place|room) is (?:chaos|a (?:mess|zoo|disaster))\b)"
    r"|哈哈|嘿嘿|呵呵|笑死|好期待|好想|累死|吵死|烦死|困死|饿死|好累|好开心|太开心|好无聊|好酸|太精彩"
    r"|我家(?:猫|狗|孩子|小孩)|我(?:妹妹|姐姐|哥哥|弟弟|老婆|老公|妈|爸|朋友)|想放假|周末.{0,6}玩"
    r"|(?:我|我的)?(?:父母|爸妈|公婆|岳父|岳母|亲戚|爷爷|奶奶|外公|外婆|姥姥|姥爷|舅舅|姑姑|小姨"
    r"|[表堂](?:哥|姐|弟|妹))|(?:房间|屋子|家里)(?:还没收拾|乱)"
)
RHETORICAL = re.compile(
    r"anything else|what else can i|how (?:else )?can i help|hope (?:this|that) helps"
    # an offer of more, unspecified help: "Anything more I can do?", "Can I help with
    # something more?"
    r"|\b(?:anything|something) (?:more|further)\b.{0,40}\b(?:help|do|assist)\b"
    r"|\b(?:help|do|assist)\b.{0,40}\b(?:anything|something) (?:more|further)\b"
    r"|还有(?:什么|其他|别的)(?:可以|需要|能)|有什么(?:可以|能)帮|还需要(?:什么|其他)帮助"
    # 还需要我做点别的吗 / 还要我帮什么忙吗
    r"|还(?:需要|要|想让)我(?:再)?(?:做|帮|办|处理|查)?(?:点|些)?(?:别的|其他|什么)",
    _I,
)
# Generic offers and sign-offs: the assistant is not waiting on these, so they are
# neither pending confirmations nor questions a later reply answers.
OFFER = re.compile(
    r"(?i:\blet me know if (?:you(?:'d| would)? (?:like|want|need|prefer)"
    r"|you have (?:any )?(?:other |more )?questions|there(?:'s| is) anything|(?:i|we) can|anything)"
    r"|\b(?:just )?let me know(?: if| whenever| when)? you(?:'d| would)? like (?:me )?to\b"
    r"|\b(?:happy|glad) to (?:help|assist|compare|look|dig|check|explain|go)\b"
    r".{0,200}\b(?:whenever|anytime|if you)"
    r"|\bfeel free to\b|\bdon'?t hesitate\b|\bif you need anything\b|\banything else\b"
    r"|\bis there anything else\b|\bhope (?:this|that) helps\b)"
    r"|随时(?:告诉|叫|联系|找|问)我?|有(?:任何)?需要(?:的话)?(?:随时|请|可以)|如(?:果|有)?需要.{0,16}(?:告诉我|叫我|说一声|联系我)"
    r"|希望(?:对您|对你|能)有(?:所)?帮助|还有(?:什么|其他|别的)(?:可以|需要|能)|还需要(?:什么|其他)帮助"
)
QUESTION_END = re.compile(r"[?？]\s*$|(?:吗|呢|么)[\s。.]*$")

# ------------------------------------------------------------------- emphasis
EMPHASIS = re.compile(
    r"\b(?:IMPORTANT|CRITICAL|NEVER|ALWAYS|MUST|DO NOT|DON'T|NOT)\b|!!|！！"
    r"|(?i:\b(?:important|critical|crucial|absolutely|under no circumstances|non-negotiable)\b)"
    r"|千万|务必|切记|一定要|一定不要|重要|严禁|绝对"
)

# ------------------------------------------------------------------- constraints
CONSTRAINT = re.compile(
    # zh
    r"必须|务必|千万|一定要|一定不要|一定得|(?<!要)不要(?!紧)|(?<!能)不能|不得|禁止|只能|只允许|只用"
    r"|只订|只选|只买|只坐|切勿|严禁|不许|不准|不可以|不可(?!能)|请勿|绝对不|绝不|始终|永远不|确保|保证"
    r"|至少|最多|不超过|不少于|不低于|不高于|不晚于|不早于|以内|以下(?=的|，|。|$)|预算|截止"
    r"|(?:^|[，,、\s]|请|你|您)别(?![人的处])"
    # en: imperatives at the start of the sentence
    r"|(?i:^(?:please\s+|pls\s+|and\s+|but\s+|also\s+|just\s+|so\s+)*"
    r"(?:never|don'?t|do not|always|only|avoid|make sure|ensure|be sure|under no circumstances"
    r"|no more than|at most|at least|stick to|stay (?:under|within|below)"
    r"|keep (?:it|them|everything)(?: under| below| within)?)\b)"
    # en: modal constraints anywhere
    r"|(?i:\b(?:must(?:n'?t| not)?|(?:should|shall) (?:never|always|not)|shouldn'?t|may not"
    r"|(?:is|are) not allowed|not allowed to|(?:is|are) (?:forbidden|prohibited|required|mandatory)"
    r"|under no circumstances|no later than|no more than|at most|at least|not (?:to )?exceed"
    r"|hard requirement|non-negotiable|without exception|budget (?:is|of|:)|deadline (?:is|:)"
    r"|limit (?:is|of|:))\b)"
    r"|(?i:\b(?:you|we|it)\s+(?:can(?:'t|not| not)|have to|are required to)\b)"
    r"|(?i:\b(?:i|we)\s+(?:don'?t|do not|never)\s+want\b)"
    r"|(?i:(?<!\bi\s)(?<!\bi've\s)(?<!\bhave\s)(?<!\bhad\s)(?<!\bve\s)\bnever\b(?!\s*mind))"
    r"|(?i:\b(?:always|never)\s+(?:use|book|cc|include|check|ask|confirm|run|keep|reply|respond"
    r"|write|answer|send|choose|pick|select|fly|stay|pay|call|mention|share)\b)"
    r"|(?i:\bonly\s+(?:use|book|choose|pick|select|fly|stay|consider|accept|allow|include|return"
    r"|show|want|take|buy|pay|run|deploy|touch|modify|edit|change|reply|respond|write)\b"
    r"|\b(?:use|book|choose|pick|select|consider|accept|allow|modify|edit|touch)\s+only\b)"
)
# Whether a text states a rule at all, asked of the alternatives that can match.
CONSTRAINT_GATED = Gated(CONSTRAINT)

# ------------------------------------------------------------------- parameters
_ZH_SET_VERB = (
    r"改成|改为|换成|换为|调整为|调整成|调整到|调成|调为|调到|设为|设置为|设置成|设成|定为|定成|变成|变为"
    r"|改到|提高到|提升到|降低到|降到|升到|增加到|增大到|减少到|减小到|减到|加到|改回|恢复为|恢复到"
    r"|必须是|应该是|应为|必须用|应该用|采用|使用|用"
)
# A value corrected after checking: "X 我再核对了一下，应该是 Y", "X 查过了，应为 Y".
ZH_CORRECTED = re.compile(
    r"^(?P<name>[^，。,；;！!？?\s][^，。,；;！!？?]{1,23}?)\s*(?:我|我们)?(?:又|再)?"
    r"(?:确认|核实|核对|查|问|算|想)(?:了一下|过了|了)?[，,]\s*(?:应该是|应为|是|改成|改为|定为|其实是)\s*"
    r"(?P<value>[^，。,；;！!？?]{1,30})"
)
ZH_CLAUSE_LEAD = re.compile(
    r"^(?:然后|再|并且|并|请|麻烦|帮我|另外|还有|那就|那|就|我们|咱们|你|您|同时|顺便|也)+\s*"
)
# An adverb between the name and the verb is not part of the name ("X 先设成 Y").
_ZH_SET_ADVERB = r"(?:(?<![优首原事预])先|再|就|也|暂时|暂且|统一|直接)?"
ZH_SET = re.compile(
    rf"^(?:把|将)?\s*(?P<name>[^，。,；;！!？?\s][^，。,；;！!？?]{{0,23}}?)\s*+{_ZH_SET_ADVERB}\s*+"
    rf"(?:从\s*(?P<old>[^，。,；;]{{1,20}}?)\s*)?(?:{_ZH_SET_VERB})\s*"
    rf"(?P<value>[^，。,；;！!？?]{{1,40}})$"
)
_EN_NAME = r"(?P<name>[A-Za-z_][\w.\-/]*(?:\s+[A-Za-z_][\w.\-/]*){0,3}?)"
_EN_VALUE = r"(?P<value>[^,;!?]{1,60})"
EN_SET = re.compile(
    rf"\b(?:change|set|switch|update|increase|decrease|raise|lower|bump|reduce|move|adjust|reset"
    rf"|revert|put|drop|push|extend|shorten|cap|limit)\s+(?:the\s+|my\s+|our\s+)?{_EN_NAME}\s+"
    rf"(?:from\s+(?P<old>[^,;!?]{{1,30}}?)\s+)?(?:to|=)\s+{_EN_VALUE}",
    _I,
)
EN_SHOULD_BE = re.compile(
    rf"(?:^|\b(?:and|but|also|so|actually|now)\s+|,\s*)(?:the\s+|my\s+|our\s+)?{_EN_NAME}\s+"
    rf"(?:should (?:now )?be|must be|needs to be|has to be|(?:is|are) now|will be)\s+{_EN_VALUE}",
    _I,
)
EN_USE_AS = re.compile(
    r"\buse\s+(?P<value>[^,;!?]{1,40}?)\s+(?:as|for)\s+(?:the\s+|my\s+|our\s+)?"
    r"(?P<name>[A-Za-z_][\w\-]*(?:\s+[A-Za-z_][\w\-]*){0,2})\s*(?:[,.;!?]|$)",
    _I,
)
ASSIGN = re.compile(
    r"(?<![=!<>])\b(?P<name>[A-Za-z_][\w.\-]{0,40})\s*=\s*(?P<value>[^\s,;=]{1,60})"
)
COLON_PAIR = re.compile(
    r"^(?P<name>[A-Za-z_\u4e00-\u9fff][\w\u4e00-\u9fff \-]{0,24}?)\s*[:：]\s*"
    r"(?P<value>[^\s].{0,59})$"
)
INSTEAD_OF = re.compile(
    r"\b(?:use|pick|choose|book|take)\s+(?P<value>[^,;!?]{1,30}?)\s+instead\s+of\s+"
    r"(?P<old>[^,;!?.]{1,30})"
    r"|(?:改?用|换成)\s*(?P<value2>[^，。,；;]{1,20}?)\s*(?:代替|替代|替换|而不是)\s*(?P<old2>[^，。,；;]{1,20})"
    r"|不用\s*(?P<old3>[^，。,；;]{1,20}?)\s*了?[，,]\s*(?:改用|换成|用)\s*(?P<value3>[^，。,；;]{1,20})",
    _I,
)
# Everything from the cue on goes (DOTALL: ``.*$`` re-scanned the rest of the line from
# every cue); a whitespace or punctuation run is entered at its start only.
VALUE_CUT = re.compile(
    r"(?<!\s)\s++(?:and|but|then|instead|because|please|for|so|if|since|as|when|unless|rather)"
    r"\b(?s:.*)"
    r"|(?:然后|并且|因为|如果|而且|以便|吧|了|啊|呀|哦|哈|呢|嘛)(?s:.*)"
    r"|(?<![.。!！?？])[.。!！?？]++$",
    _I,
)
PARAM_NAME_STOP = re.compile(
    r"^(?:it|this|that|these|those|there|here|everything|anything|something|which|what|who|he|she"
    r"|they|we|i|you|me|one|all|each|note|example|e\.?g|error|question|answer|ps|update|reminder"
    r"|todo|to-?do|re|fyi|warning|tip|summary|goal|task|next|step \d+|result|output|status|reason"
    r"|response|reply|sure|yes|no|ok|time|the time|date|source|http|https"
    # discourse labels that introduce speech, not a setting
    r"|heads[ -]?up|fun fact|side note|btw|by the way|psa|quick question|random thought|off topic"
    r"|just so you know|news|confession|story|true story"
    # the verb of "the rate limit went from A to B", when "limit" was read as the verb
    r"|went|goes|gone|moved|moves|changed|changes|jumped|dropped|rose|fell|is|was|are|were"
    r"|我|你|您|他|她|它|这|那|这个|那个|我们|你们|他们|步骤|注意|问题|答案|备注|提醒|待办|目标|任务|结果|原因|下一步|时间)$",
    _I,
)

# ------------------------------------------------------------------- revocation
REVOKE = re.compile(
    # zh
    r"(?<!不要)(?<!不能)(?<!不得)(?<!禁止)(?<!不用)(?<!别)(?:取消|撤销|撤回|作废)(?P<t1>[^，。,；;！!？?]{0,30})"
    r"|(?:不再需要|不用再|不需要再|不必再|无需再|不再要求|不再限制|不用管|不用考虑|不必考虑|忽略(?:之前|刚才|前面)?(?:说的)?)"
    r"(?P<t2>[^，。,；;！!？?]{0,30})"
    # Suffix cues ("X 不算了", "X is no longer needed"): the target is the text before
    # them, cut in code; a lazy prefix group here would be tried at every position.
    r"|(?P<suffix>(?:的(?:要求|限制))?(?:不算了|不要了|作废了?|取消了|不用了|不需要了|没必要了|可以忽略|不再适用)"
    # "X的限制取消吧", "X这条规定去掉吧": the rule named, then withdrawn
    r"|(?:的|这条|这个)(?:要求|限制|规定|规则)就?(?:取消|去掉|拿掉|撤掉)(?:吧|了|掉)?"
    r"|(?i:(?<!\s)\s++(?:is|are) (?:no longer|not) (?:needed|required|necessary"
    r"|a (?:requirement|constraint|problem|concern|restriction)|an issue)\b))"
    r"|^(?:算了|当我没说|刚才说的不算|忘了它|忘掉吧)"
    # en
    r"|(?i:^(?:scratch that|never ?mind|forget (?:it|that)|ignore that|disregard that)\b)"
    r"|(?i:(?<!don't )(?<!do not )(?<!never )"
    r"\b(?:forget about|forget|disregard|cancel|drop|lift|scrap|scratch"
    r"|remove the (?:constraint|requirement|restriction|limit)(?: on| about| of)?"
    r"|ignore (?:what i said about|my earlier|the earlier|the previous|my previous)"
    r"|you can (?:now )?(?:ignore|skip|drop))\s+(?P<t4>[^,;!?.]{1,60}))"
    r"|(?i:\b(?:it'?s|it is) (?:fine|ok(?:ay)?|alright) (?:now )?to\s+(?P<t5>[^,;!?.]{1,60}))"
    r"|(?i:\b(?:no longer|not anymore|any ?more)\b)"
)
NEGATED_TARGET = re.compile(r"^(?:the|my|that|this|about|on|of)\s+", _I)

# ------------------------------------------------------------------- high stakes
HIGH_STAKES = (
    ("allergy", re.compile(r"过敏|乳糖不耐|乳糜泻|allerg|anaphyla|celiac|lactose intoleran", _I)),
    (
        "medical",
        re.compile(
            r"哮喘|糖尿病|高血压|心脏病|怀孕|孕期|癫痫|病史|医嘱|正在(?:服用|吃).{0,8}药|药物|处方|胰岛素|血型|残疾|轮椅"
            r"|\basthma|diabet|hypertension|heart condition|epilep|pregnan|medication|prescri"
            r"|\bdosage\b|\binsulin\b|blood type|wheelchair|disabilit|medical condition"
            r"|(?<!\d)\d++\s?mg\b",
            _I,
        ),
    ),
    (
        "payment",
        re.compile(
            r"卡号|银行卡|信用卡|借记卡|尾号|后四位|card (?:ending|number|no)"
            r"|ending (?:in|with) \d{4}|last (?:4|four) digits|credit card|debit card"
            r"|\bcvv\b|\biban\b|routing number"
            r"|billing address",
            _I,
        ),
    ),
    (
        "account",
        re.compile(
            r"账号|账户|帐号|会员号|常旅客|account (?:number|no|id)|\bacct\b|frequent flyer"
            r"|loyalty (?:number|id|program)|member(?:ship)? (?:number|id)",
            _I,
        ),
    ),
    (
        "identity",
        re.compile(
            r"护照|身份证|签证|驾照|出生日期|社保号|passport|national id|\bssn\b|social security"
            r"|driver'?s licen[cs]e|date of birth|\bdob\b",
            _I,
        ),
    ),
)
# A card or account number: 13–69 digits, spaces or dashes ending in 4 digits. Bounded,
# so a long run of digits is not re-scanned from every group ("1234 1234 …").
LONG_DIGITS = re.compile(r"\b\d[\d -]{8,64}(\d{4})\b")

# ------------------------------------------------------------------- goals
GOAL_EXPLICIT = re.compile(
    r"(?:我的|我们的|这次的|现在的|本次)?(?:主要|最终|新的?)?(?:目标|任务|目的)(?:是|为|改为|变成|：|:)\s*(?P<t1>.*)"
    r"|新任务[：:，,]?\s*(?P<t2>.*)|(?:计划有变|改计划了|换个任务|现在改成)[，,：:]?\s*(?P<t3>.*)"
    r"|(?i:\b(?:my|our|the) (?:main |overall |new |real |actual )?"
    r"(?:goal|objective|task|aim|mission) (?:now )?(?:is|will be|:)(?:\s+now)?\s*(?:to\s+)?"
    r"(?P<t4>.*))"
    r"|(?i:\bnew task:?\s*(?P<t5>.*))|(?i:\bchange of plans?\b[,:.!]?\s*(?P<t6>.*))"
    r"|(?i:\b(?:instead,? )?(?:i|we) now (?:want|need) to\s+(?P<t7>.*))"
    r"|(?i:\binstead,? (?:i|we) (?:want|need) to\s+(?P<t8>.*))"
)
REQUEST = re.compile(
    r"^(?:请|麻烦|帮我|帮忙|我想|我要|我需要|我希望|我打算|我准备|能不能|能否|可以帮|可不可以|给我|替我|帮|需要你|你能|你可以)"
    r"|(?i:^(?:please\s+|pls\s+|hey,?\s+|hi,?\s+)?(?:can|could|would|will) you\b)"
    r"|(?i:^(?:please|pls)\b)"
    r"|(?i:^(?:help me|i want|i'?d like|i would like|i need|we need|we want|i'?m trying to"
    r"|i am trying to|i'?m looking (?:for|to)|let'?s|i have to|we have to|my task)\b)"
    r"|(?i:^(?:book|find|write|create|build|fix|analy[sz]e|train|plan|draft|deploy|generate|search"
    r"|make|compute|summari[sz]e|translate|implement|refactor|migrate|set up|investigate|debug"
    r"|compare|order|buy|schedule|prepare|organi[sz]e|clean|review|check|get|send|update|add"
    r"|design|research|reserve|rent|cancel|email|call|run|load|fetch|download|upload|list)\b)"
)

# A question that weighs a value rather than setting it: "should we raise X to 15?",
# "what if we set X to 15?", "要不要把X改成15？", "X改成15怎么样？". It proposes; the
# value holds only once someone decides (``sentence.proposes`` also needs the question
# mark, and a polite request — "can you set X to 15?", "能不能把X改成15？" — is not one).
PROPOSAL = re.compile(
    r"(?i:\b(?:should|shall)\s+(?:we|i|it|they|the|our|my|this|that)\b|\bwhat if\b|\bhow about\b"
    r"|\bwhat about\b|\bwhy (?:don'?t (?:we|i)|not)\b"
    r"|\b(?:do|would) you (?:think|suggest|recommend)\b|\bdoes it make sense\b"
    r"|\bwould it (?:make sense|be (?:better|wise|a good idea|ok(?:ay)?))\b"
    r"|\bis it (?:worth|better|wise|a good idea|ok(?:ay)? (?:if|to))\b|\bmaybe we\b"
    r"|\bthoughts on\b)"
    r"|要不要|是不是|是否|要不(?!是)|怎么样|怎样|如何|好不好|行不行|好吗|行吗|可以吗|合适吗|合不合适"
    r"|该不该|应不应该|需不需要|用不用|会不会更"
)

# A new instruction rather than an answer: imperatives REQUEST does not list.
IMPERATIVE = re.compile(
    r"(?i:^(?:now\s+|then\s+|ok(?:ay)?,?\s+)?(?:show|look|tell|give|pull|open|start|launch|roll"
    r"|build|deploy|register|evaluate|transfer|issue|request|set|move|backfill|query|create|book"
    r"|restart|stop|delete|remove|drop|retry|add|change|switch)\b)"
    r"|^(?:再|先|现在)?(?:看看|看一下|查一下|查查|帮我|给我|把|开始|跑一下|跑一次|部署|构建|预订|预约|订|找一下|调一下"
    r"|列一下|发|建|加|申请|设置|注册|评估|创建|拉|转|退款|取消|删除)"
)

# ------------------------------------------------------------------- deadlines
# A milestone with a date is a deadline said in passing ("另外月底上线", "code freeze
# Friday", "the release ships on the 30th"): it binds the work like a rule.
MILESTONE = re.compile(
    r"上线|封版|发版|发布|交付|提测|验收|交稿|截止|到期|冻结"
    r"|(?i:\b(?:go(?:es)?[ -]live|launch(?:es|ing)?|releas(?:e|es|ing)|ship(?:s|ping)?"
    r"|(?:code|feature) freeze|deliver(?:y|s|ed)?|due|deadline|cut-?off|submission)\b)"
)

# ------------------------------------------------------------------- preferences
PREFERENCE = re.compile(
    r"我(?:比较|更|最|还是)?(?:喜欢|偏好|偏爱|倾向于?|习惯|爱)|我不(?:太)?喜欢|我讨厌|偏好|最好(?!的)(?:是|用)?"
    r"|(?:请|麻烦)?(?:用|使用)(?:中文|英文|英语|汉语)|靠窗|靠过道"
    r"|(?i:\bi (?:prefer|like|love|enjoy|favou?r|hate|dislike|don'?t like|do not like"
    r"|would rather|would prefer)\b|\bi'd (?:rather|prefer)\b|\bmy preference\b|\bpreferably\b"
    r"|\bif possible\b|\b(?:reply|respond|answer|write|talk|speak) (?:to me )?in (?:english|chinese"
    r"|mandarin|[A-Z][a-z]+)\b|\b(?:aisle|window) seat)"
)

# ------------------------------------------------------------------- decisions
DECISION = re.compile(
    r"决定|就用|就选|选定|定了|改用|换用|敲定|就订|就按|最终(?:选|用|定)"
    r"|(?i:\b(?:let'?s go with|we'?ll go with|i'?ll go with|go with|(?:we|i) (?:have )?decided"
    r"|decided to|decision:|we'?ll use|let'?s use|i choose|i'?ll take|we chose|settled on"
    r"|opt(?:ed)? for|switch to|stick with|actually,? (?:use|let'?s|go|book|make|take)"
    r"|instead of|rather than)\b)|代替|而不是|替代"
)

# ------------------------------------------------------------------- pending
CONFIRM_CUE = re.compile(
    r"确认|是否|要不要|可以吗|好吗|行吗|需要我|要我|您看|同意|批准|可以(?:吗|么)|对吗|对不对"
    r"|(?i:\b(?:shall i|should i|do you want|would you like|can you confirm|please confirm|confirm"
    r"|is (?:that|this|it) (?:ok|okay|alright|fine|correct)|ok(?:ay)? to|proceed|go ahead|approve"
    r"|approval|want me to)\b)"
)
AWAITING = re.compile(
    r"等待您?的?(?:确认|回复|批准|决定)|请您?确认|待您确认|需要您(?:确认|提供|同意|决定)|请提供"
    r"|(?i:\bawaiting (?:your )?(?:approval|confirmation|reply|response|decision)"
    r"|\bwaiting for your|\bplease confirm\b|\blet me know (?:if|whether|which|when|how)"
    r"|\bonce you confirm\b"
    r"|\bi need your\b|\bplease provide\b)"
)
USER_PENDING = re.compile(
    r"待定|还没定|还没决定|再说吧|等(?:我|我们|他|她|老板|经理|领导|客户).{0,10}(?:确认|决定|回复|通知|批准|同意)"
    r"|(?i:\bwaiting (?:for|on)\b|\bawaiting\b|\bTBD\b|\bto be (?:confirmed|decided|determined)\b"
    r"|\bi'?ll (?:check|confirm|get back|let you know)\b|\bnot (?:sure|decided) yet\b"
    r"|\bhaven'?t decided\b|\bneeds? (?:sign-?off|approval) from\b)"
)
AFFIRM = re.compile(
    r"^(?:好的?|可以|行|确认|没问题|同意|就这样|对|是的?|嗯+|要|需要|好啊|订吧|就这个|批准|ok|okay)"
    r"|(?i:^(?:yes|yep|yeah|yup|sure|ok(?:ay)?|go ahead|go for it|confirm(?:ed)?|do it|sounds good"
    r"|please do|approved?|correct|right|that works|perfect|fine|absolutely|definitely)\b)"
)
NEGATE = re.compile(
    r"^(?:不用|不要|算了|不行|取消|否|别|先不|暂时不|等等|不需要|不了)"
    r"|(?i:^(?:no|nope|nah|don'?t|do not|cancel|not now|not yet|skip|stop|hold on|wait"
    r"|never ?mind)\b)"
)
CHOICE_QUESTION = re.compile(
    r"哪|什么|几|多少|或者|还是|(?i:\b(?:which|what|when|where|how many|how much|or)\b)"
)

# ------------------------------------------------------------------- todos, blockers
TODO = re.compile(
    r"(?:接下来|下一步|之后|稍后|回头|待办|还需要|还得|还要|别忘了|记得|需要先|然后再)[：:，,\s]*(?P<t1>.+)"
    r"|(?i:^(?:next,?|then,?|after that,?|afterwards,?|later,?|todo:?|to-?do:?"
    r"|next steps?(?: is| are|:)|remaining:?|(?:we |i |you )?still need to|(?:we |i )?also need to"
    r"|remember to|don'?t forget to|please also)\s*(?:to\s+)?(?P<t2>.+))"
    r"|(?i:\b(?:still need to|next step is to|the next thing is to)\s+(?P<t3>.+))"
    r"|(?i:^(?:next|now|then|after that),?\s+(?:i'?ll|i will|let me|we'?ll|we will)\s+(?P<t4>.+))"
    r"|^(?:接下来|下一步|然后)我(?:会|将|来|再)(?P<t5>.+)"
    r"|^然后(?:再|要|还要|还得)?[，,\s]*(?P<t6>.+)"
)
# What a Chinese todo's text starts with that is not the action ("接下来要订…", "下一步是配置…").
TODO_TEXT_LEAD = re.compile(r"^(?:是|要|就是|得|需要|先|再|我们要|我们得)\s*")
PREREQUISITE = re.compile(
    r"(?i:\b(?:once|after|when|as soon as)\s+(?:you|we|i|they)\s+(?:have|get|receive|send|provide"
    r"|share|give|confirm|upload|finish)\s+(?P<once_given>[^,.;]+))"
    r"|(?i:\b(?:requires?|pending|waiting (?:for|on)|blocked (?:by|on)|depends on|until (?:i|we)"
    r" (?:get|have|receive))\s+(?P<required>[^,.;]+))"
    r"|(?i:\bwithout\s+(?P<without>(?:your|the|a|an)\s+[^,.;]+))"
    r"|(?i:\b(?:once|as soon as|after)\s+"
    r"(?P<once_event>(?:the|a|an|my|our|your|his|her|their)\s+\w[^,.;]*))"
    r"|(?:需要|要|得)先?(?:您|你|用户)?(?:提供|给|发|上传|确认)(?P<zh_provide>[^，。,；;]+)"
    r"|等(?:您|你|我|我们)?(?:提供|给|发|上传|确认|拿到|收到)(?P<zh_wait_given>[^，。,；;]{1,60}?)(?:之?后|以后|再)"
    r"|缺少(?P<zh_missing>[^，。,；;]+)|还没有(?P<zh_not_yet>[^，。,；;]+)|(?:需要|依赖)(?P<zh_needed_for>[^，。,；;]{1,20})才能"
    # "等顾客确认收到换货之后再关": whoever the subject, what comes after 等 is awaited.
    r"|等(?P<zh_wait_until>[^，。,；;]{2,30}?)(?:之后|以后|后)(?:再|才)"
)
BLOCKER = re.compile(
    r"卡在|卡住|受阻|阻塞|无法|没法|没有权限|缺少|缺乏|做不了|不能继续|进行不下去|一直失败|被拒"
    r"|(?i:\b(?:blocked (?:by|on)|stuck (?:on|at|with)|unable to|can(?:'t|not) (?:proceed|continue"
    r"|access|find|connect|complete|book|load|open|run|reach)|couldn'?t|could not"
    r"|don'?t have (?:access|permission)|no (?:access|permission)|permission denied"
    r"|missing (?:the|a|an|your)|lack(?:ing)?|waiting on)\b)"
)
TODO_DONE = re.compile(
    # The subject ends on a non-space: a lazy ``.+?`` followed by ``\s*`` re-scanned a
    # run of spaces from each of its positions.
    r"^(?P<t1>.+?)(?<!\s)\s*+(?:已经|都)?(?:完成了|搞定了|做完了|弄好了|办好了|订好了|处理好了)"
    r"|^(?:已完成|完成了|搞定了?)[：:，,\s]*(?P<t2>.+)"
    r"|(?i:^(?:done with|finished|completed|i'?ve (?:finished|completed|done))\s+(?P<t3>.+))"
    r"|(?i:^(?P<t4>.+?)(?<!\s)\s++(?:is|are|has been|have been)\s++"
    r"(?:done|finished|completed|taken care of|sorted)\b)"
)

# ------------------------------------------------------------------- prefilters
# Cheap literal hints, searched in the lower-cased sentence before the family
# pattern. A literal trie lets ``re`` reject a position on its first character,
# which the family patterns (lookbehinds, \b, lazy prefixes) cannot; most
# sentences match few families, so this keeps a 16k-token slice well under
# 100 ms. Each hint must match everything its family can match (a superset).


def literal_hint(words: str) -> Trie:
    """A pattern that finds any of the ``|``-separated literals, built as a trie
    (``gates.trie``): only whether some literal occurs matters."""
    return trie(words.split("|"))


HINT_EMPHASIS = literal_hint(
    "important|critical|never|always|must|do not|don't|not|!!|！！|crucial|absolutely|under no"
    "|non-negotiable|千万|务必|切记|一定|重要|严禁|绝对"
)
HINT_CONSTRAINT = literal_hint(
    "必须|务必|千万|一定|不要|不能|不得|禁止|只|切勿|严禁|不许|不准|不可|请勿|绝|始终|永远|确保"
    "|保证|至少|最多|不超过|不少于|不低于|不高于|不晚于|不早于|以内|以下|预算|截止|别|never|don"
    "|do not|always|only|avoid|make sure|ensure|be sure|under no|no more|at most|at least"
    "|stick to|stay |keep |must|should|shall|may not|not allowed|forbidden|prohibited|required"
    "|mandatory|no later|exceed|requirement|non-negotiable|without exception|budget|deadline"
    "|limit|can't|cannot|can not|have to|want"
)
HINT_HIGH_STAKES = literal_hint(
    "过敏|乳糖|乳糜|allerg|anaphyla|celiac|lactose|哮喘|糖尿|高血压|心脏|怀孕|孕期|癫痫|病史"
    "|医嘱|药|处方|胰岛素|血型|残疾|轮椅|asthma|diabet|hypertension|heart condition|epilep"
    "|pregnan|medication|prescri|dosage|insulin|blood type|wheelchair|disabilit|medical|mg|卡号"
    "|银行卡|信用卡|借记卡|尾号|后四位|card|ending|last|cvv|iban|routing|billing|账号|账户|帐号"
    "|会员号|常旅客|account|acct|frequent flyer|loyalty|member|护照|身份证|签证|驾照|出生日期"
    "|社保|passport|national id|ssn|social security|driver|date of birth|dob"
)
HINT_GOAL = literal_hint(
    "目标|任务|目的|计划有变|改计划|现在改成|goal|objective|task|aim|mission|change of plan"
    "|now want|now need|instead"
)
HINT_PREFERENCE = literal_hint(
    "喜欢|偏好|偏爱|倾向|习惯|爱|讨厌|最好|中文|英文|英语|汉语|靠窗|靠过道|prefer|like|love"
    "|enjoy|favo|hate|dislike|rather|if possible|reply|respond|answer|write|talk|speak|aisle"
    "|window"
)
HINT_TODO = literal_hint(
    "接下来|下一步|之后|稍后|回头|待办|todo|还需要|还得|还要|别忘了|记得|需要先|然后|next|then"
    "|after|later|to-do|to do|remaining|still need|also need|remember|forget|please also|now"
)
HINT_PREREQUISITE = literal_hint(
    "once|after|when|as soon as|require|pending|waiting|blocked|depends|until|without|需要|要"
    "|得|等|缺少|还没有|依赖"
)
HINT_DECISION = literal_hint(
    "决定|就用|就选|选定|定了|改用|换用|敲定|就订|就按|最终|代替|而不是|替代|go with|decid"
    "|ll use|lets use|let's use|choose|ll take|chose|settled|opt|switch to|stick with|actually"
    "|instead of|rather than"
)
HINT_USER_PENDING = literal_hint(
    "待定|还没定|还没决定|再说|等|waiting|await|tbd|to be |ll check|ll confirm|ll get back"
    "|ll let you know|not sure|not decided|haven|sign-off|signoff|approval"
)
HINT_PROPOSAL = literal_hint(
    "should|shall|what if|how about|what about|why don|why not|you think|you suggest"
    "|you recommend|would it|does it make sense|is it|maybe we|thoughts on"
    "|要不|是不是|是否|怎么样|怎样|如何|好不好|行不行|好吗|行吗|可以吗|合适吗|合不合适|该不该|应不应该"
    "|需不需要|用不用|会不会更"
)
HINT_TODO_DONE = literal_hint(
    "完成|搞定|做完|弄好|办好|订好|处理好|done|finished|completed|taken care|sorted"
)
HINT_BLOCKER = literal_hint(
    "卡在|卡住|受阻|阻塞|无法|没法|没有权限|缺少|缺乏|做不了|不能继续|进行不下去|一直失败|被拒"
    "|blocked|stuck|unable|can't|cannot|couldn|could not|don't have|dont have|do not have"
    "|no access|no permission|permission denied|missing|lack|waiting on"
)
HINT_REVOKE = literal_hint(
    "取消|撤销|撤回|作废|不再|不用|不需要|不必|无需|忽略|不算|不要了|没必要|可以忽略|算了"
    "|当我没说|刚才说的|忘|scratch|never mind|nevermind|forget|ignore|disregard|cancel|drop"
    "|lift|scrap|remove the|you can|fine|ok|alright|no longer|not needed|not required"
    "|not necessary|not a |not an |anymore|any more"
)
HINT_MILESTONE = literal_hint(
    "上线|封版|发版|发布|交付|提测|验收|交稿|截止|到期|冻结|go live|go-live|goes live|launch"
    "|releas|ship|freeze|deliver|due|deadline|cutoff|cut-off|submission"
)
HINT_PARAMETER = literal_hint(
    "改|换|调|设|定|变|提高|提升|降|升|增|减|加|恢复|必须是|应该是|应为|用|从|change|set|switch"
    "|update|increase|decrease|raise|lower|bump|reduce|move|adjust|reset|revert|extend|shorten"
    "|cap|limit|should|must be|needs to be|has to be|is now|are now|will be|use|instead|=|:|："
)
HINT_OFFER = literal_hint(
    "let me know|happy to|glad to|feel free|hesitate|need anything|anything else|hope th|随时"
    "|有需要|任何需要|如需|如果需要|希望对|希望能|还有什么|还有其他|还有别的|还需要什么|还需要其他"
)
HINT_CHITCHAT = literal_hint(
    "weather|how are|how's it|how is it|how was your|what's up|whats up|joke|funny|the best"
    "|did you have|have a|过得"
    "|awesome|sunny|raining|天气|你好吗|最近怎么样|笑话|你真|吃了吗|哈哈"
)
