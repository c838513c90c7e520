"""Hides secrets before anything is logged: secret-named env values, --token style arguments,
and passwords inside URLs. It must never log, and never return an unredacted secret."""
import os

MASK = "***"
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASS", "CREDENTIAL", "AUTH", "COOKIE", "SIGNATURE",
                "SESSION", "PRIVATE")


def _words():
    extra = os.environ.get("EARLYLOG_REDACT", "")
    return SECRET_WORDS + tuple(w.strip().upper() for w in extra.split(",") if w.strip())


def secret_name(name):
    """True for names like HF_TOKEN, AWS_SECRET_ACCESS_KEY, --api-key, db_password."""
    upper = name.upper().replace("-", "_")
    return any(word in upper for word in _words())


def url(text):
    """Mask the password of every `scheme://user:password@host` in text, and secret-named query
    values (`?token=X`, `&api_key=X`: presigned and webhook URLs carry their credential there)."""
    out, start = [], 0
    while True:
        at = text.find("://", start)
        if at < 0:
            break
        end = at + 3
        stop = end
        while stop < len(text) and text[stop] not in " \t\"'/?#":
            stop += 1
        authority = text[end:stop]
        if "@" in authority:
            userinfo, host = authority.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            authority = (user + ":" + MASK if ":" in userinfo else MASK) + "@" + host
        out.append(text[start:end] + authority)
        start = stop
    out.append(text[start:])
    joined = "".join(out)
    return _query(joined) if "=" in joined and ("?" in joined or "&" in joined) else joined


def _query(text):
    """Mask the value of every `name=value` after `?` or `&` whose name looks secret."""
    out, i = [], 0
    while i < len(text):
        if text[i] in "?&":
            eq = text.find("=", i)
            stop = eq
            while stop >= 0 and stop < len(text) and text[stop] not in " \t\"'&#":
                stop += 1
            if eq > i + 1 and not any(c in text[i + 1:eq] for c in " \t/?&") and secret_name(text[i + 1:eq]):
                out.append(text[i:eq + 1] + MASK)
                i = stop
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def value(name, text):
    """An environment value as it may be logged."""
    return MASK if secret_name(name) and text else url(text)


def argv(args):
    """The command line with `--token X`, `--password=X`, `HF_TOKEN=X`, `Bearer X` and URL
    passwords masked; a word with spaces (an `sh -c` string: a parent's argv is logged too) is
    masked word by word."""
    out, hide_next = [], False
    for arg in args:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if " " in arg.strip():
            out.append(" ".join(argv(arg.split(" "))))
            continue
        if arg.startswith("-") and "=" in arg:
            option, _, val = arg.partition("=")
            out.append(option + "=" + (MASK if secret_name(option) else url(val)))
            continue
        if (arg.startswith("-") and len(arg) > 2 and secret_name(arg.lstrip("-"))) or \
                arg.strip("'\"").lower() in ("bearer", "basic", "token"):
            hide_next = True
        out.append(_assignment(url(arg)) if "=" in arg else url(arg))
    return out


def command(args):
    """The command line as a shell would take it back, secrets masked (argv): the start line's and
    the exec record's words."""
    return " ".join(_shell_word(a) for a in argv(args))


def _shell_word(word):
    if word and all(c.isalnum() or c in "@%+=:,./-_" for c in word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def _assignment(word):
    """Mask a NAME=value word whose NAME looks secret."""
    name, eq, _ = word.partition("=")
    bare = name.lstrip("-").strip("'\"")
    if eq and bare.replace("_", "").replace("-", "").isalnum() and secret_name(bare):
        return name + "=" + MASK
    return word
