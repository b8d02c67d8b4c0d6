"""Best-effort masking of credentials and e-mail addresses in text bound for persistence."""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Iterable
from typing import Final

from nrllm_core._credential_words import TRANSLATED_PASSWORD_WORDS, names_a_credential

__all__ = [
    "LEAF_MAX_CHARS",
    "REDACTION_MASK",
    "TRUNCATION_MARKER",
    "mask_secrets",
    "names_a_credential",
    "redact",
    "redact_tree",
]

REDACTION_MASK: Final = "***"
LEAF_MAX_CHARS: Final = 2000
TRUNCATION_MARKER: Final = "… [truncated]"

# Inputs are bounded to depth 64 upstream; this only stops a hostile or cyclic value from
# exhausting the stack.
_MAX_TREE_DEPTH: Final = 100

# A mask can expose a shape its original neighbour hid (``ftp://a@b.com:pw@host`` only reads
# as userinfo once the address is gone), so the catalogue runs until nothing changes. Two
# passes settle every input found so far; the cap only guards against a pathological chain.
_MAX_PASSES: Final = 4

# The line breaks ``str.splitlines`` knows. No mask removes one, so a caller may mask a whole
# file and split it afterwards with every line where it was (a key block spans many lines).
_BREAKS: Final = "\\n\\r\\x0b\\x0c\\x1c-\\x1e\\x85\\u2028\\u2029"
_LINE: Final = re.compile(f"[^{_BREAKS}]+")


def _one_of(words: Iterable[str]) -> str:
    """An alternation of ``words``, longest first, so a shorter word never cuts a longer one."""
    return "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True))


# A cheap necessary condition for every shape below: text without any of these fragments
# cannot match, so it skips the catalogue entirely.
# The translated words are looked for apart, in the lower-cased text: in the trigger below
# they would make every search several times slower.
_TRANSLATED_TRIGGER: Final = _one_of(TRANSLATED_PASSWORD_WORDS)
_TRIGGER: Final = (
    r"@|[?&;][\w\-]+=|(?i:bearer|pass|pw|secret|credential|cred|key|tok|auth|sig|salt|[_\-]pin"
    r"|mysql|mariadb|softlayer|curl)|-{4}|:(?:[0-9]{1,5}|\*):"
    r"|sk-|k_(?:live|test)_|whsec_|A(?:KIA|SIA|BIA|CCA|3T)|gh[pousr]_|github_pat_|gl[a-z]{2,5}-"
    r"|GR1348941|npm_|hf_|api_org_|pypi-|sq0|xox|xapp-|hooks\.slack|AIza|SG\.|eyJ|-us\d"
    r"|(?:AC|SK)[0-9a-z]{32}|AKC|AP[0-9A-F]|\d{8,10}:|[MNO][\w\-]{23}|[A-Za-z0-9/+]{40}"
)

# Every line of a private key block, from its BEGIN line to its END line, or to the end of
# the text when the END line is missing: a block cut short is still a key.
_KEY_BLOCK: Final = (
    r"-(?P<key_block>-{3,4}[ ]?BEGIN[ ][A-Z0-9 ]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?[ ]?-{4,5}"
    r"(?:(?s:.*?)-{4,5}[ ]?END[ ][A-Z0-9 ]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?[ ]?-{4,5}|(?s:.*)))"
    rf"|P(?P<putty>uTTY-User-Key-File-[0-9]+:(?:(?s:.*?)Private-MAC:[^{_BREAKS}]*|(?s:.*)))"
)

# The user part and password stop at quotes, commas and semicolons so that a port followed
# later by an unrelated address (``"https://example.com:8080","contact":"a@b.org"``) is never
# read as ``user:password@``. A password may hold ``@``, ``/`` and ``#`` as typed
# (``postgres://u:p@ss/w#rd@host/db``): it runs to the last ``@`` within 128 characters that a
# host follows, unless it starts like a port and a path (``https://h:8080/users/a@b.org``).
# A scheme only starts at the beginning of a run, which keeps the scan linear on long dotted
# strings.
_URL_USERINFO: Final = (
    r"[A-Za-z](?<![\w+.\-].)(?P<userinfo>(?P<userinfo_keep>[A-Za-z0-9+.\-]*://"
    r"[^\s:/?#@\"'<>`,;\\]*):(?:(?![0-9]{1,5}[/?#])[^\s?\"'<>`,;\\]{1,128}@"
    r"(?=[A-Za-z0-9\[][A-Za-z0-9.\-\]:]*+(?:[/?#\s\"'<>`,;\\]|\Z))|[^\s/?#@\"'<>`,;\\]+@))"
)

# ``client_secret``, ``x_api_key`` or ``X-Amz-Signature``: any name *ending* in a credential
# word counts, but a bare ``key``, ``sig`` or ``auth`` only on its own, so ``sort_key`` and
# ``max_tokens`` survive. ``&amp;`` covers URLs quoted in HTML. The value stops at structural
# characters so that fragments, JSON, HTML and Markdown neighbours survive.
# A bare ``key``, ``sig`` or ``auth`` also names a map pin, a sort or a mode, so its value
# must look like a token: a digit or a symbol in it, or 20 characters (``?key=ergonomic``
# stays).
_URL_QUERY_CREDENTIAL: Final = (
    r"[?&](?P<query>(?P<query_keep>(?:(?<=&)amp;)?"
    r"(?:(?i:(?:[a-z0-9]+[_\-])*(?:api[_\-]?key|secret[_\-]?key|private[_\-]?key|token|secret"
    r"|password|passwd|signature|credential))="
    r"|(?i:key|sig|auth)=(?=[^&\s\"'#<>`)\\]{0,19}?[^A-Za-z&\s\"'#<>`)\\]|[^&\s\"'#<>`)\\]{20})))"
    r"[^&\s\"'#<>`)\\]+)"
)

# ``Authorization: Basic …``, ``"Authorization": "Bearer …"``: the scheme stays, whatever
# follows it up to a quote or the end of the line is the credential.
_AUTHORIZATION: Final = (
    r"[AaPp](?<![_\-].)(?P<authz>(?P<authz_keep>(?i:(?<=p)roxy-authorization|(?<=a)uthorization)"
    r"[\"']?[ \t]*"
    r"[:=][ \t]*[\"']?(?:(?i:basic|bearer|digest|negotiate|ntlm|token|hmac)[ \t]+)?)"
    rf"[^{_BREAKS}\"'`]+)"
)

# Before the vendor shapes, so ``Bearer sk-…`` collapses to one mask. The lookahead asks for
# something token-like (a digit, an inner symbol, or 20+ characters) so that prose such as
# "the bearer of this letter" is left alone.
_BEARER: Final = (
    r"[Bb](?<!\w.)(?P<bearer>(?P<bearer_keep>(?i:earer)\s+)"
    r"(?=[A-Za-z0-9._~+/\-]{20}|[A-Za-z0-9._~+/\-]*?(?:[0-9]|[._~+/\-][A-Za-z0-9._~+/\-]))"
    r"[A-Za-z0-9._~+/\-]+=*)"
)

# A credential name: one that contains a word only credentials use (``dbPassword``,
# ``client_secret``, ``AccountKey``, ``private_key_id``), or that ends in ``token`` or in a
# ``pass`` of its own (``DB_PASS``, ``keyPass``; not ``bypass``). A name only starts where a
# run of name characters starts, and one scan decides: it runs through the letters no
# credential word starts with in one step, tries the words only at the others (a ``key`` or
# ``pass`` looks back for what qualifies it), and at the end of the run looks back for the
# endings. Every run is read once, however long. Each word starts with a class the engine
# checks before entering it.
_NAME_CHAR: Final = r"[A-Za-z0-9_.\-]"
_KEY_QUALIFIERS: Final = (
    "api", "auth", "service", "account", "db", "database", "priv", "private", "client",
    "access", "signing", "master", "encryption", "license", "app", "consumer", "storage",
    "subscription", "hmac", "jwt", "session", "aws",
)  # fmt: skip
_PASS_QUALIFIERS: Final = ("db", "database", "key")


def _qualified(word: str, qualifiers: tuple[str, ...]) -> str:
    """``word``, then a look back for one of ``qualifiers`` before it, glued or joined by
    ``_``, ``.`` or ``-``: one look per length, after a first look at the letter before."""
    last = "".join(sorted({q[-1] for q in qualifiers}))
    by_length: dict[int, list[str]] = {}
    for q in qualifiers:
        by_length.setdefault(len(q), []).append(q)
    behind = "|".join(
        f"(?<={'|'.join(f'{q}{joint}{word}' for q in group)})"
        for group in by_length.values()
        for joint in ("", "[_.\\-]")
    )
    first = f"[{word[0].upper()}{word[0]}]"
    return f"{first}(?i:{word[1:]}(?:(?<=[{last}]{word})|(?<=[{last}][_.\\-]{word}))(?:{behind}))"


# "Password" in other languages (core's vocabulary) counts as a whole word of a name, at its
# start, after a separator or at a camelCase boundary (``DB_SENHA``, ``userKennwort``), not
# inside another word (``enclave`` is no ``clave``). ``contraseña`` alone counts anywhere in a
# name, as detect-secrets reads it.
_TRANSLATED_WORD: Final = (
    rf"(?:(?<![A-Za-z])|(?<=[a-z0-9])(?=[A-Z]))(?i:{_one_of(TRANSLATED_PASSWORD_WORDS)})(?![a-z])"
)
_CONTAINED_WORD: Final = (
    r"(?:[Pp](?i:ass(?:wor[dt]|wd|phrase)|wd)|[Ss](?i:ecret)|[Cc](?i:redential|ontrase(?:ñ|n)a)"
    rf"|{_qualified('pass', _PASS_QUALIFIERS)}|{_qualified('key', _KEY_QUALIFIERS)}"
    rf"|{_TRANSLATED_WORD})"
)
# The letters a credential word can start with: the scan checks for a word only there.
_WORD_STARTS: Final = "".join(
    sorted({c for w in ("pass", "pwd", "secret", "credential", "key") for c in (w[0], w[0].upper())}
           | {c for w in TRANSLATED_PASSWORD_WORDS if w[0].isascii() for c in (w[0], w[0].upper())})
)  # fmt: skip
_OTHER_NAME_CHARS: Final = (
    "".join(c for c in string.ascii_letters if c not in _WORD_STARTS) + string.digits + "_.\\-"
)


def _ends_not_in(words: tuple[str, ...]) -> str:
    """Look backs that fail when the text so far ends in one of ``words``, in any case."""
    by_length: dict[int, list[str]] = {}
    for word in words:
        by_length.setdefault(len(word), []).append(word)
    return "(?i:" + "".join(f"(?<!{'|'.join(group)})" for group in by_length.values()) + ")"


# A name that holds a credential word but ends in a word that makes it a setting about the
# credential, not the credential: ``password_min_length``, ``PASSWORD_FILE``,
# ``secretRotationPolicy``.
_SETTING_ENDINGS: Final = (
    "length", "len", "count", "min", "max", "size", "policy", "strength", "expiry", "ttl",
    "timeout", "attempts", "retries", "field", "label", "prompt", "required",
    "enabled", "changed", "_at", "file", "path", "dir", "type", "regex", "pattern",
    "validator", "message", "error", "errors", "widget", "mode", "rules", "format",
)  # fmt: skip
# The scan stops at the run's end or where a credential word starts; what follows it then
# decides whether the run is a credential name, and reads the rest of the run. Besides the
# words, a name ending in ``token``, ``creds``, a ``pass`` of its own (``DB_PASS``, ``PASS``;
# a lower-case ``pass`` alone is a verb or Python's statement), or an ``auth`` or ``pin`` after
# ``_`` or ``-`` (``REDIS_AUTH``, ``ADMIN_PIN``; not ``oauth``, ``spin`` or ``self.auth``) is
# one.
_NAME_SCAN: Final = rf"(?>(?:[{_OTHER_NAME_CHARS}]++|(?!{_CONTAINED_WORD})[{_WORD_STARTS}])*+)"
_NAME_END: Final = (
    rf"(?:{_CONTAINED_WORD}{_NAME_CHAR}*+{_ends_not_in(_SETTING_ENDINGS)}"
    r"|(?i:(?<=token))|(?i:(?<=creds))|(?i:(?<=[0-9_.\-]pass))|(?<=PASS)(?<![A-Za-z0-9_.\-]PASS)"
    r"|(?<=[a-z0-9]Pass)|(?i:(?<=[_\-]auth))|(?i:(?<=[_\-]pin)))"
)
_NAME_REST: Final = _NAME_SCAN + _NAME_END
_NAME: Final = rf"(?<!{_NAME_CHAR}){_NAME_REST}"
# What joins a name to its value: ``=``, ``:=``, ``=>``, ``==``, a ``:`` that is not a port
# or a scope, the parenthesis of a call with a quoted argument (``setPassword("…")``), and
# for a Go-style declaration a type in between (``password string =``), after an optional
# array index (``password[8] = @"…"``). A
# quoted name also takes ``,`` (``define('DB_PASSWORD', …)``), ``] =`` (``env["TOKEN"] =``)
# and an XML ``value=`` attribute (``<add key="ApiKey" value="…"/>``).
_BARE_JOIN: Final = (
    r"(?:\[[0-9]{0,20}\])?"
    r"(?:[ \t]*(?::=|=>|={1,3}|!==?|:(?![0-9/:])|\((?=[ \t]*[rRbBfFuU]{0,2}[@$]?[\"'`]))"
    r"|[ \t]+[A-Za-z_][\w.\[\]*]{0,40}[ \t]*=(?![=>]))"
)
_QUOTED_JOIN: Final = r"(?:[ \t]*(?::=|=>|={1,3}|::?|\][ \t]*=(?!=))|[ \t]+value[ \t]*=)"
# A type annotation between a ``:`` and the value (``password: str = "…"``,
# ``token: str | None = …``) goes with the name. It is one type, or a few joined by ``|``, with
# spaces only beside a ``|`` or inside brackets, so ``password: hunter2, role = admin`` is a
# value followed by another assignment, not an annotation.
_TYPE: Final = r"[A-Za-z_][\w.]{0,40}(?:\[[\w.\[\], |]{0,60}\])?"
_ANNOTATION: Final = rf"(?:(?<=:)[ \t]*{_TYPE}(?:[ \t]*\|[ \t]*{_TYPE}){{0,4}}[ \t]*=(?![=>]))?"

# An unquoted value. On a line of its own (``.env``, YAML, INI, properties) it runs to the end
# of the line but stops before another ``NAME=`` (``PGPASSWORD=… PGUSER=app psql``,
# ``password = …, role = admin``); elsewhere
# it ends at whitespace or a structural character. A value whose line ends in a backslash goes
# on over the next line, as a shell, ``.properties`` or Makefile reads it (``password = \``,
# then the value): each line of it is masked.
_LINE_VALUE: Final = (
    r"[^\s,;]++(?:(?:[,;][ \t]*+|[ \t]++)(?![A-Za-z_][\w.\-]*+[ \t]*=(?!=))[^\s,;]*+)*+"
)
_LINE_CONTINUED: Final = rf"(?:(?<=\\)(?:\r\n|[\n\r])[ \t]*{_LINE_VALUE})*+"
_WORD_VALUE: Final = r"[^\s\"'`,;&<>(){}\[\]\\]++"
_WORD_CONTINUED: Final = rf"\\(?:\r\n|[\n\r])[ \t]*{_WORD_VALUE}"


def _assignment(kind: str, name_and_join: str, *, whole_line: bool) -> str:
    """A credential assignment: a quoted value keeps its quotes (and an ``f``, ``b`` or ``@``
    prefix); an unquoted one ends as ``_LINE_VALUE`` (with ``whole_line``) or ``_WORD_VALUE``
    says, or goes on over lines ending in a backslash. A ``#`` and a space after a space start a
    comment there, as Python, YAML and shell read them (``access_token:  # pragma: no cover``),
    not a value; ``password = #hunter2`` is a value (an INI or ``.properties`` file reads it
    so)."""
    if whole_line:
        unquoted = _LINE_VALUE + _LINE_CONTINUED
    else:
        unquoted = rf"(?:{_WORD_VALUE}(?:{_WORD_CONTINUED})*+|(?:{_WORD_CONTINUED})++)"
    return (
        rf"(?P<{kind}>(?P<{kind}_keep>{name_and_join}{_ANNOTATION}[ \t]*)"
        rf"(?:(?P<{kind}_open>[rRbBfFuU]{{0,2}}[@$]?(?P<{kind}_quote>[\"'`]))"
        rf"(?P<{kind}_body>(?:(?!(?P={kind}_quote))[^\\{_BREAKS}]|\\[^{_BREAKS}])*+)"
        rf"(?P<{kind}_close>(?P={kind}_quote)?)|(?!(?<=[ \t])\#[ \t]){unquoted}))"
    )


# At the start of a line, after indentation, ``export`` or a YAML ``-``.
_LINE_ASSIGNMENT: Final = r"(?m:^)[ \t]*(?:export[ \t]+|-[ \t]+)?" + _assignment(
    "line_assign",
    rf"[\"'`]?{_NAME}[\"'`]?(?:{_QUOTED_JOIN}|[ \t]*,|{_BARE_JOIN})",
    whole_line=True,
)
# A quoted name takes a ``,`` only as a call's first argument (``define('DB_PASSWORD', …)``):
# in a list or a tuple the next item is another name (``("username", "password", "host")``).
_QUOTED_ASSIGNMENT: Final = r"[\"'`](?<=(?P<quote>.))(?:(?<=\(.)(?P<quote_call>))?" + _assignment(
    "quoted_assign",
    rf"{_NAME}(?P=quote)(?:{_QUOTED_JOIN}|(?(quote_call)[ \t]*,|(?!)))",
    whole_line=False,
)
# After a credential name (see ``_NAMED``).
_BARE_ASSIGNMENT: Final = _assignment("assign", _BARE_JOIN, whole_line=False)
# After a name in a script other than Latin (``пароль=…``, ``密码: …``), which the names read
# once (below) do not start at.
_SCRIPT_ASSIGNMENT: Final = _assignment(
    "script_assign",
    rf"(?<![A-Za-z0-9_])(?:{_one_of(w for w in TRANSLATED_PASSWORD_WORDS if not w[0].isascii())})"
    rf"(?![a-z]){_BARE_JOIN}",
    whole_line=False,
)
_ASSIGNMENTS: Final = frozenset({"line_assign", "quoted_assign", "assign", "script_assign", "flag"})

# A command-line flag named like a credential takes the next word: ``--password VALUE``.
_FLAG: Final = rf"-(?<!{_NAME_CHAR}-)" + _assignment(
    "flag", rf"{_NAME_REST}[ \t]+", whole_line=False
)

# ``passwordField.setText("…");``: after a credential name (see ``_NAMED``), what a call or
# an operator puts between, and a quoted value that ends a statement or an argument list. A
# ``)`` in between means the name was an argument (``decode(credentials).decode("utf-8")``).
_CALLED: Final = (
    rf"(?P<called>(?P<called_keep>[^\s\"'`;,)]{{0,50}}+[ \t]*(?P<called_quote>[\"'`]))"
    rf"(?:(?!(?P=called_quote))[^\\{_BREAKS}])++(?=(?P=called_quote)[ \t]*[;)]))"
)

# ``if "hunter2" == password``: a quoted value compared with a credential name.
_COMPARED: Final = (
    rf"[\"'`](?<=(?P<compared_quote>.))(?P<compared>(?:(?!(?P=compared_quote))[^\\{_BREAKS}])++"
    rf"(?P=compared_quote)(?=[ \t]*[!=]==?[ \t]*{_NAME}))"
)

# ``{\"password\": \"…\"}``: JSON written inside a JSON string, its quotes escaped.
_ESCAPED_MEMBER: Final = (
    rf"\\(?P<escaped>(?P<escaped_keep>\"{_NAME}\\\"[ \t]*:[ \t]*\\\")"
    rf"(?:[^\\{_BREAKS}]|\\(?!\")[^{_BREAKS}])++(?=\\\"))"
)

# ``curl -u user:pass`` and ``--user user:pass``: the password after the first ``:``. The
# look for the flag stops at the end of the command and at the next ``curl``, and never backs
# up, as for MySQL below.
_CURL_USER: Final = (
    r"[Cc](?<![\w.\-].)(?P<curl>(?P<curl_keep>(?i:url)"
    rf"(?:[^{_BREAKS};&|\- \tcC]++|[ \t](?!-(?:u|-user)[ \t=])|-|[cC](?!(?i:url)))*+"
    r"[ \t]-(?:u|-user)(?:[ \t]+|=)"
    r"[\"']?[^\s:\"']*:)[^\s\"']+)"
)

# ``.netrc``: ``machine h login u password p`` (or ``default password p``).
_NETRC: Final = (
    r"(?=[mladMLAD])(?<![\w\-])(?P<netrc>(?P<netrc_keep>"
    r"(?:(?:machine|login|account)[ \t]++[^\s]++|default)[ \t]++password[ \t]++)[^\s]++)"
)

# ``.pgpass``: ``host:port:database:user:password`` on a line of its own; ``\:`` is a colon
# inside a field.
_PGPASS: Final = (
    rf"(?m:^)[ \t]*(?P<pgpass>(?P<pgpass_keep>[^\s:#]++:(?:[0-9]{{1,5}}|\*):[^\s:]++:[^\s:]++:)"
    rf"(?:[^\s:\\]|\\[^{_BREAKS}])++)(?=[ \t]*(?:[{_BREAKS}]|\Z))"
)

# ``sshpass -p PASS ssh host``, after any other options.
_SSHPASS: Final = (
    r"[Ss](?<![\w.\-].)(?P<sshpass>(?P<sshpass_keep>(?i:shpass)(?:[ \t]++-[^p\s][^\s]*+)*+"
    rf"[ \t]++-p[ \t]*+)(?:'[^'{_BREAKS}]*+'|\"[^\"{_BREAKS}]*+\"|[^\s\"'`;&|]++))"
)

# ``mysql -u root -pS3cretPass99``: the MySQL and MariaDB clients take a password glued to
# ``-p``. The look for it stops at the end of the command, at the first `` -p`` and at the
# next client name, and never backs up, so every character of a long line is read once.
_MYSQL_PASSWORD: Final = (
    r"[Mm](?<![\w.\-].)(?P<mysql>(?P<mysql_keep>(?i:ysql|ariadb)[\w\-]*"
    rf"(?:[^{_BREAKS};&|mM \t]++|[ \t](?!-p)|[mM](?!(?i:ysql|ariadb)))*+[ \t]-p)"
    rf"(?:'[^'{_BREAKS}]*+'|\"[^\"{_BREAKS}]*+\"|[^\s\"'`;&|]+))"
)


def _ends_in(words: tuple[str, ...]) -> str:
    """A look back for any of ``words``, in any case: one look per length, after one look at
    the last letter (most names end in none of theirs)."""
    last = "".join(sorted({word[-1] for word in words}))
    by_length: dict[int, list[str]] = {}
    for word in words:
        by_length.setdefault(len(word), []).append(word)
    behind = "|".join(f"(?<={'|'.join(group)})" for group in by_length.values())
    return f"(?i:(?<=[{last}])(?:{behind}))"


# A value shaped like a secret: 16 or more characters of the base64 alphabets with a digit
# among them, and upper and lower case letters, or letters of one case only where the whole
# value is lower-case letters and digits or upper-case hex. ``user_profile`` and ``id``
# are not secrets; ``Ht7Kq2mZ9pX4vL8n`` and a hex digest are.
_SECRET_LIKE: Final = (
    r"(?=[A-Za-z0-9+/_\-]*?[0-9])"
    r"(?:(?=[A-Za-z0-9+/_\-]*?[A-Z])(?=[A-Za-z0-9+/_\-]*?[a-z])[A-Za-z0-9+/_\-]{16,}+"
    r"|(?=[0-9]*+[a-z])[a-z0-9]{16,}+(?![A-Za-z+/_\-])"
    r"|(?=[0-9]*+[A-F])[0-9A-F]{16,}+(?![A-Za-z+/_\-]))=*"
)
# A name that ends in a word a key, signature or credential goes by, glued or not (``key``,
# ``sig``, ``salt``, ``slkey``, ``cos_secretkey``, ``softlayer-api-token``): its value is
# masked in any assignment form (``=``, ``:``, ``::``, ``=>``, a space, a bracketed or quoted
# name, escaped JSON) when it is shaped like a secret. Words such as ``key`` are ordinary
# enough that an ordinary value under them stays; after a password or token word (``clpw``,
# ``apipass``) joined to it by more than a space (``=``, ``:``, ``,``, a quote or a bracket),
# any run of 16 or more key characters is taken, as Cloudant's all-letter keys; after a space
# only, a word of prose is not ("We pass configurationManager").
# What follows the name (see ``_NAMED``).
_ENTROPY_ASSIGNMENT: Final = (
    r"(?P<entropy>(?P<entropy_keep>(?:(?P<entropy_strong>)"
    + _ends_in(
        (
            "pw",
            "pwd",
            "pass",
            "passwd",
            "password",
            "passphrase",
            "token",
            "tok",
            "secret",
            "credential",
            "credentials",
        )
    )
    + "|"
    + _ends_in(("key", "keys", "sig", "signature", "salt", "auth"))
    + r")(?:[ \t]++(?![\\\"'`\[(:=,])|(?=[ \t]*[\\\"'`\][(:=,])(?P<entropy_joined>)"
    + r"\\?[\"'`]?\]?[ \t]*(?:[:=]{1,2}>?|,)?[ \t]*[\[(]?\\?[\"'`]?))"
    + rf"(?(entropy_strong)(?(entropy_joined)(?:{_SECRET_LIKE}|[A-Za-z0-9+/_\-]{{16,}}+=*)"
    + rf"|{_SECRET_LIKE})|{_SECRET_LIKE}))"
)

# The three shapes that start with a name read it once: a run of name characters, ``named``
# when it is a credential name, which an assignment or a call may follow; any name may end in a
# key-like word that a secret-shaped value follows. The read never backs up into the run.
_NAMED: Final = (
    rf"(?<!{_NAME_CHAR})(?>{_NAME_SCAN}(?:{_NAME_END}(?P<named>))?)"
    rf"(?:(?(named){_BARE_ASSIGNMENT}|(?!))|(?(named){_CALLED}|(?!))|{_ENTROPY_ASSIGNMENT})"
)

# Artifactory API keys (``AKC…``) and encrypted passwords (``AP…``): the prefix is short and
# ordinary words share it (``APACHE2``), so the key stands alone and mixes upper case, lower
# case and digits.
_ARTIFACTORY: Final = (
    r"A(?<![A-Za-z0-9_]A)(?=[A-Za-z0-9]*?[a-z])(?=[A-Za-z0-9]*?[0-9])"
    r"(?P<artifactory>(?:KC[A-Za-z0-9]{10,}+|P[0-9A-F][A-Za-z0-9]{8,}+)(?![A-Za-z0-9_]))"
)

# ``<password>…</password>`` and ``<db:password>…``: the text up to the next tag, each of its
# lines masked.
_XML_ELEMENT: Final = (
    rf"<(?P<xml>(?P<xml_keep>(?:[A-Za-z_][\w.\-]*:)?{_NAME}(?:[ \t][^<>{_BREAKS}]{{0,200}})?>)"
    r"[^<]++(?=</))"
)

# The leftmost shape wins, so a key whose body happens to contain another vendor's prefix is
# masked whole instead of half-eaten. No shape asks for a word boundary before it
# (``token_ghp_…`` and ``xAKIA…`` are keys), and the trailing ``[A-Za-z0-9_]*`` takes any
# glued word characters along, so a mask never leaves a word character behind it that could
# start a new match on the next pass. Only ``sk-`` glued to a letter asks for a digit in
# its body: ``task-…`` is a word, ``1sk-proj-…`` a key. Twilio and Mailchimp keys ask for a
# digit too, so that a long lower-case word is not one.
_VENDOR_KEY: Final = r"""(?:
    sk-(?:(?<![A-Za-z]sk-)|(?=(?:proj-|svcacct-|admin-)?[A-Za-z0-9_]{0,31}[0-9]))
    [A-Za-z0-9_\-]{16,}
  | [spr]k_(?:live|test)_[A-Za-z0-9]{24,} | whsec_[A-Za-z0-9]{24,}
  | A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}
  | gh[pousr]_[A-Za-z0-9]{36,} | github_pat_[A-Za-z0-9_]{22,}
  | gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_\-]{20,} | GR1348941[A-Za-z0-9_\-]{20,}
  | npm_[A-Za-z0-9]{36,} | hf_[A-Za-z0-9]{30,} | api_org_[A-Za-z0-9]{30,}
  | pypi-AgE[A-Za-z0-9_\-]{50,} | sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,}
  | xox[abeoprs]-[A-Za-z0-9\-]{10,} | xapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]+
  | hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{8,}
  | AIza[0-9A-Za-z_\-]{35,} | (?:AC|SK)(?=[a-z]{0,31}[0-9])[a-z0-9]{32}
  | [a-z0-9](?<![a-z0-9][a-z0-9])(?=[a-z]{0,31}[0-9])[a-z0-9]{31,}-us[0-9]{1,2}
  | api\.softlayer\.com/soap/v3(?:\.1)?/[a-z0-9]{64}
  | SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}
  | [0-9][0-9]{7,9}:[A-Za-z0-9_\-]{35}
  | [MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27}
)(?P<vendor>[A-Za-z0-9_]*)"""

# A JWT starts at the beginning of its run, glued characters and all, and the atomic group
# commits to the first ``eyJ`` in it, which keeps a long ``eyJeyJ…`` run linear.
_JWT: Final = (
    r"(?<![_\-])(?P<jwt>(?>(?P<jwt_glue>[A-Za-z0-9_\-]*?)eyJ)[A-Za-z0-9_\-]*+"
    r"\.[A-Za-z0-9_\-]++\.[A-Za-z0-9_\-]++)"
)

# An AWS secret access key has no prefix: 40 characters of its alphabet standing alone, with
# an upper-case letter, a lower-case letter and a digit among them. A git SHA-1 (lower-case
# hex) and an absolute path (a leading ``/``) are not keys.
_AWS_SECRET: Final = (
    r"(?<![/+=])(?P<aws_secret>(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
    r"(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9][A-Za-z0-9/+]{39})(?![A-Za-z0-9/+=])"
)

# A match only starts where a run of address characters starts, which keeps a long run
# without ``@`` linear instead of quadratic. ``_`` is allowed in the local part so
# ``first_last@…`` is not half-masked.
_EMAIL: Final = (
    r"[A-Za-z0-9_.%+\-](?<![_.%+\-].)"
    r"(?P<email>[A-Za-z0-9_.%+\-]*@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}[A-Za-z0-9_]*)"
)

# One pass over the text for the whole catalogue. Where two shapes start at the same place
# the first listed wins. Every shape either starts with a character the engine checks before
# trying it, or only where a run of letters and digits starts (the shared lookbehind): a
# position inside a long run costs a few checks, not one per shape.
# Every shape that starts a run but an e-mail address needs three characters of it (a
# two-letter scheme and its colon at least).
_AT_RUN_START: Final = (
    "(?=[A-Za-z0-9_.%+\\-])(?<![A-Za-z0-9])(?:(?=[A-Za-z0-9_.+\\-]{2}[A-Za-z0-9_.+:\\-])(?:"
    + "|".join(
        (
            _URL_USERINFO,
            _AUTHORIZATION,
            _BEARER,
            _NAMED,
            _JWT,
            _AWS_SECRET,
        )
    )
    + f")|{_EMAIL})"
)
_CATALOGUE: Final = "|".join(
    (
        _KEY_BLOCK,
        _URL_QUERY_CREDENTIAL,
        _XML_ELEMENT,
        _ESCAPED_MEMBER,
        _QUOTED_ASSIGNMENT,
        _PGPASS,
        _LINE_ASSIGNMENT,
        _COMPARED,
        _FLAG,
        _MYSQL_PASSWORD,
        _CURL_USER,
        _SSHPASS,
        _NETRC,
        _SCRIPT_ASSIGNMENT,
        _ARTIFACTORY,
        _VENDOR_KEY,
        _AT_RUN_START,
    )
)


# Compiling the catalogue takes longer than the rest of ``import nrllm_core``, so it waits
# for the first text to mask.
@functools.cache
def _compiled() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    return (
        re.compile(_TRIGGER),
        re.compile(_TRANSLATED_TRIGGER),
        re.compile(_CATALOGUE, re.VERBOSE),
    )


# Values that are code, never a credential. Unquoted: a type or a literal, alone or in a union
# (``password: bytes``, ``token: str | None``, ``password = None``, ``hide_password=True``),
# a call or an index (``password = get_password()``, ``password=auth[1]``), the variable of
# the same name passed on (``password=password``, ``self.token = token``,
# ``opts["password"] = url.password``), or an attribute named like a credential. Quoted:
# nothing but punctuation and placeholders (``if token == "[":``, ``"{%s}"``).
_CODE_WORDS: Final = (
    "None", "null", "nil", "undefined", "NULL", "True", "False", "true", "false", "...",
    "str", "bytes", "bytearray", "int", "bool", "object", "Any", "string", "SecretStr",
    "SecretBytes",
)  # fmt: skip
_CODE_VALUE: Final = re.compile(
    rf"(?:{_one_of(_CODE_WORDS)})(?:[ \t]*\|[ \t]*(?:{_one_of(_CODE_WORDS)}))*[ \t]*[,;)]?"
)
_CALL_OR_INDEX: Final = re.compile(r"[A-Za-z_][\w.]*[(\[]")
_PASSED_ON: Final = re.compile(r"(?P<path>(?:[A-Za-z_]\w*\.)*)(?P<name>[A-Za-z_]\w*)[,;)]?")
# An attribute read whose attribute is named like a credential (``impl._replace_token``,
# ``proxy.raw_auth``) is a variable; ``process.env.X`` may be anything.
_CREDENTIAL_ATTRIBUTE: Final = re.compile(r"(?i:.*(?:token|auth|secret|passw|pwd|credential))")
_LAST_NAME: Final = re.compile(r"(?P<name>[A-Za-z_]\w*)[^\w]*\Z")
_PLACEHOLDERS: Final = re.compile(r"(?:[^A-Za-z0-9]|%[sdr]|\{\w*\})*")
# A reST field list names a parameter; what follows its colon is prose
# (``:param password: the database password``).
_FIELD: Final = re.compile(
    r":(?:param|parameter|arg|argument|key|keyword|type|ivar|cvar|var)[ \t][^:]*\Z"
)


def _is_code(match: re.Match[str], kind: str, value: str) -> bool:
    """Whether the unquoted ``value`` of an assignment ``match`` is code (see above)."""
    if _CODE_VALUE.fullmatch(value) or _CALL_OR_INDEX.match(value):
        return True
    if match.string[match.end() : match.end() + 1] in ("(", "["):
        return True
    start = match.start(f"{kind}_keep")
    if _FIELD.search(match.string, max(0, start - 100), start):
        return True
    passed = _PASSED_ON.fullmatch(value)
    if passed is None:
        return False
    if passed["path"] and _CREDENTIAL_ATTRIBUTE.match(passed["name"]):
        return True
    before = _LAST_NAME.search(match.string, max(0, start - 100), match.end(f"{kind}_keep"))
    if before is None:
        # The name was read before the assignment's own group (see ``_NAMED``).
        before = _LAST_NAME.search(match.string, max(0, start - 100), start)
    return before is not None and before["name"] == passed["name"]


def _kept(match: re.Match[str], kind: str) -> str:
    """The text of ``match`` up to the end of its ``{kind}_keep`` group."""
    return match.string[match.start() : match.end(f"{kind}_keep")]


def _masked(match: re.Match[str]) -> str:
    # Every alternative ends in the group named after its kind, so that group closes last.
    kind = match.lastgroup or ""
    keep = f"{kind}_keep"
    if keep in match.re.groupindex and match.start(keep) >= 0:
        value = match.string[match.end(keep) : match.end()]
        if value and not value.strip("*"):
            # Already a mask, or one a length cap cut short (``KEY=**``): masking it again
            # would only lengthen it past the cap.
            return match[0]
    if kind in ("key_block", "putty"):
        return _LINE.sub(REDACTION_MASK, match[0])
    if kind == "xml":
        kept = _kept(match, kind)
        return kept + _LINE.sub(REDACTION_MASK, match[0][len(kept) :])
    if kind in _ASSIGNMENTS:
        if match[f"{kind}_quote"] is None:
            kept = _kept(match, kind)
            value = match[0][len(kept) :]
            if _is_code(match, kind, value):
                # Code may still hold a credential (``os.environ.get("TOKEN", "ghp_…")``).
                return kept + _masked_within(match.string, match.end(f"{kind}_keep"), match.end())
            return kept + _LINE.sub(REDACTION_MASK, value)
        if _PLACEHOLDERS.fullmatch(match[f"{kind}_body"]):
            return match[0]
        return _kept(match, kind) + match[f"{kind}_open"] + REDACTION_MASK + match[f"{kind}_close"]
    if kind == "userinfo":
        return f"{_kept(match, kind)}:{REDACTION_MASK}@"
    if kind == "vendor":
        # The OpenAI mask keeps ``sk-`` so a reader can tell what was removed.
        return ("sk-" if match[0].startswith("sk-") else "") + REDACTION_MASK
    if kind == "jwt":
        return match["jwt_glue"] + REDACTION_MASK
    if kind == "compared":
        return match["compared_quote"] + REDACTION_MASK + match["compared_quote"]
    if kind == "entropy":
        # A key-like name's value can be an OpenAI key: its mask keeps ``sk-`` as alone.
        kept = _kept(match, kind)
        return kept + ("sk-" if match[0].startswith("sk-", len(kept)) else "") + REDACTION_MASK
    if kind in (
        "query", "authz", "bearer", "called", "mysql", "escaped", "curl", "netrc", "pgpass",
        "sshpass",
    ):  # fmt: skip
        return _kept(match, kind) + REDACTION_MASK
    return REDACTION_MASK


def _masked_within(text: str, start: int, end: int) -> str:
    """``text[start:end]`` with every shape the catalogue finds there masked, each read in its
    context in ``text``."""
    pieces: list[str] = []
    for found in _compiled()[2].finditer(text, start, end):
        pieces += (text[start : found.start()], _masked(found))
        start = found.end()
    return "".join(pieces) + text[start:end]


def mask_secrets(text: str) -> str:
    """Mask credentials and e-mail addresses in ``text`` with ``***``, without a length cap."""
    trigger, translated, catalogue = _compiled()
    if trigger.search(text) is None and translated.search(text.lower()) is None:
        return text
    for _ in range(_MAX_PASSES):
        masked = catalogue.sub(_masked, text)
        if masked == text:
            break
        text = masked
    return text


def redact(text: str) -> str:
    """Mask ``text`` and cap it at ``LEAF_MAX_CHARS`` characters plus ``TRUNCATION_MARKER``."""
    # A marker already at the end (a redacted text redacted again) is not masked with what
    # precedes it: read as the rest of an unclosed value (``password="***``), it would be
    # masked away, and redacting twice would not give what redacting once gave.
    marked = text.endswith(TRUNCATION_MARKER)
    masked = mask_secrets(text[: -len(TRUNCATION_MARKER)] if marked else text)
    if len(masked) <= LEAF_MAX_CHARS:
        return masked + TRUNCATION_MARKER if marked else masked
    # The cut can end a run early and make a shape of it (40 characters are an AWS secret key
    # only when nothing follows them): what is kept is masked as it now stands, so that
    # redacting the result again finds nothing new.
    return mask_secrets(masked[:LEAF_MAX_CHARS]) + TRUNCATION_MARKER


def redact_tree(value: object, *, keys: bool = False) -> object:
    """Apply ``redact`` to every string leaf of nested dicts, lists and tuples, each read with
    its key as context.

    A value under a key that names a credential (``password``, ``db_password``,
    ``client_secret``, ``api_key``, ``token``, ``Authorization``, ``contraseña``, ``cvv``: any
    key :func:`names_a_credential` reads so, the vocabulary the builtin plugin's column rule
    uses) is masked whole, strings and numbers at any depth below it; ``prompt_tokens`` or
    ``sort_key`` stay readable. A string that holds a JSON object or array is read as one, its
    leaves masked with their keys as context, and written back as JSON. With ``keys``, every
    string key is masked like a value too (keys that mask alike are numbered, so none is
    lost); otherwise keys are kept as they are. Tuples come back as lists and other scalars
    are unchanged. A container nested more than 100 levels deep, or one that contains itself,
    becomes ``***``.
    """
    return _Walk(keys=keys).node(value, 1, under_credential=False)


# Read as JSON: a string that is one object or array, not longer than a leaf may be kept
# whole many times over (a longer one is masked as text).
_JSON_MAX_CHARS: Final = 50 * LEAF_MAX_CHARS


class _Walk:
    __slots__ = ("_ancestors", "_keys")

    def __init__(self, *, keys: bool) -> None:
        self._keys = keys
        self._ancestors: set[int] = set()

    def node(self, value: object, depth: int, *, under_credential: bool) -> object:
        if isinstance(value, str):
            return self._leaf(value, depth, under_credential=under_credential)
        if under_credential and isinstance(value, int | float) and not isinstance(value, bool):
            return REDACTION_MASK
        if not isinstance(value, dict | list | tuple):
            return value
        if depth > _MAX_TREE_DEPTH or id(value) in self._ancestors:
            return REDACTION_MASK
        self._ancestors.add(id(value))
        try:
            if isinstance(value, dict):
                return self._members(value, depth, under_credential=under_credential)
            return [self.node(item, depth + 1, under_credential=under_credential) for item in value]
        finally:
            self._ancestors.discard(id(value))

    def _members(
        self, value: dict[object, object], depth: int, *, under_credential: bool
    ) -> dict[object, object]:
        out: dict[object, object] = {}
        numbers: dict[str, int] = {}
        for key, item in value.items():
            secret = under_credential or (isinstance(key, str) and names_a_credential(key))
            if self._keys and isinstance(key, str):
                key = masked = redact(key)
                number = numbers.get(masked, 1)
                while key in out:
                    number += 1
                    key = f"{masked} ({number})"
                numbers[masked] = number
            out[key] = self.node(item, depth + 1, under_credential=secret)
        return out

    def _leaf(self, text: str, depth: int, *, under_credential: bool) -> object:
        if under_credential:
            return REDACTION_MASK if text else text
        inner = _json_container(text)
        if inner is None:
            return redact(text)
        walked = self.node(inner, depth + 1, under_credential=False)
        return redact(json.dumps(walked, ensure_ascii=False))


def _json_container(text: str) -> object:
    """The object or array ``text`` holds as JSON, else ``None``."""
    stripped = text.strip()
    if len(stripped) > _JSON_MAX_CHARS or stripped[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None
