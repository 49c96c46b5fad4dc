"""An oracle for "is this text a valid prefix of a JSON object?" that shares nothing with the C++ validator: Python's
own json parser. A text P is a valid prefix when, after one of a few short completions of a token cut off at the
end (a string, an escape, a \\u escape, a number, a literal), Python's parser either accepts it or fails exactly at
the end of the input (it wanted more). An invalid prefix fails before its end whatever is appended, so the oracle
cannot call an invalid prefix valid (beyond Python's NaN / Infinity leniency)."""
import json

_COMPLETIONS = ["", '"', 'n"', '0"', '00"', '000"', '0000"', "0", "rue", "ue", "e", "alse", "lse", "se", "ull", "ll", "l"]


def _fails_only_at_end(text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return e.pos >= len(text)
    return isinstance(value, dict)


def is_json_object_prefix(text):
    if text.strip() == "":
        return True
    if not text.lstrip().startswith("{"):
        return False
    return any(_fails_only_at_end(text + c) for c in _COMPLETIONS)


def is_json_object(text):
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False
