"""Stand-in for the `hjson` package, which Debian 12 does not package.

DeepSpeed imports hjson only to read config files (hjson is a superset of JSON).
gen_case.py always hands DeepSpeed a dict, so the standard json module suffices.
"""
import json as _json
from json import JSONDecodeError as HjsonDecodeError  # noqa: F401


def load(fp, object_pairs_hook=None, **kw):
    return _json.load(fp, object_pairs_hook=object_pairs_hook, **kw)


def loads(s, object_pairs_hook=None, **kw):
    return _json.loads(s, object_pairs_hook=object_pairs_hook, **kw)


def dump(obj, fp, **kw):
    return _json.dump(obj, fp, **kw)


def dumps(obj, **kw):
    return _json.dumps(obj, **kw)


def dumpsJSON(obj, **kw):
    return _json.dumps(obj, **kw)
