"""The words credentials go by, in the languages nrllm meets, and whether a name uses them.

One vocabulary for the redactor (``nrllm_core.redact`` reads the translated words from here)
and for the builtin plugin's column rule, which withholds a column named with one of them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Final

__all__ = ["TRANSLATED_PASSWORD_WORDS", "names_a_credential"]

# "Password" in other languages, each as written and, where it has an accent or a letter
# outside ASCII, as it is often typed without. Compared as whole words of a name.
TRANSLATED_PASSWORD_WORDS: Final = (
    "contraseña", "contrasena", "clave",  # es
    "senha", "palavrapasse",  # pt
    "motdepasse",  # fr (``mot_de_passe`` is also read as three words)
    "passwort", "kennwort",  # de
    "wachtwoord",  # nl
    "parola", "parolachiave",  # it
    "hasło", "haslo",  # pl
    "пароль",  # ru, uk
    "heslo",  # cs, sk
    "jelszó", "jelszo",  # hu
    "lösenord", "losenord", "adgangskode", "passord", "salasana",  # sv, da, no, fi
    "şifre", "sifre", "parolă",  # tr, ro
    "密码", "密碼", "口令",  # zh
    "パスワード", "暗証番号",  # ja
    "비밀번호", "암호",  # ko
)  # fmt: skip

# Words that alone name a credential (a trailing ``s`` or number is dropped before looking).
_CREDENTIAL_WORDS: Final = frozenset(
    {
        "password", "passwd", "pwd", "pw", "pass", "passphrase", "passcode", "pin", "secret",
        "token", "tok", "salt", "hash", "hashed", "digest", "credential", "creds", "key",
        "mfa", "otp", "totp", "hotp", "jwt", "bearer", "auth", "authorization", "recovery",
        "dsn", "cookie", "apikey", "pan", "rsa", "pem", "seed", "ssn", "iban", "cvv", "cvc",
        "cvv2", "mnemonic", "passport",
        # Other languages: secrets, keys, tokens, PINs.
        *TRANSLATED_PASSWORD_WORDS,
        "secreto", "segredo", "segreto", "geheim", "sekret", "секрет", "秘密", "密钥", "密鑰",
        "jeton", "токен", "令牌", "トークン", "ключ", "chiave", "schlüssel", "schluessel",
        "sleutel", "klucz", "llave", "chave", "cle", "clé", "暗号鍵", "秘密鍵",
    }
)  # fmt: skip

# Words that name a credential only after one of their qualifiers: ``access_code``,
# ``card_number``, ``connection_string``; ``country_code`` and ``phone_number`` are data.
_NUMBER_QUALIFIERS: Final = frozenset(
    {"card", "cc", "account", "acct", "security", "tax", "routing"}
)
_QUALIFIED: Final[Mapping[str, frozenset[str]]] = {
    "code": frozenset(
        {
            "access", "verification", "verify", "reset", "auth", "recovery", "otp", "mfa",
            "security", "confirmation", "confirm", "activation", "backup", "login", "sms",
            "2fa", "unlock", "pin",
        }
    ),
    "number": _NUMBER_QUALIFIERS,
    "num": _NUMBER_QUALIFIERS,
    "no": _NUMBER_QUALIFIERS,
    "nr": _NUMBER_QUALIFIERS,
    "string": frozenset({"connection", "conn"}),
    "str": frozenset({"connection", "conn"}),
    "answer": frozenset({"security", "secret"}),
    "card": frozenset({"credit", "debit"}),
    "id": frozenset({"tax"}),
    "security": frozenset({"social"}),
    "passe": frozenset({"de", "palavra"}),
}  # fmt: skip

# Credential words that ordinary neighbours make ordinary again: the words before them and
# the words after them. ``prompt_tokens`` counts tokens, ``sort_key`` orders rows,
# ``commit_hash`` names a commit, ``pass_rate`` is a share of tests.
_TOKEN_COUNT: Final = (
    frozenset({"prompt", "completion", "total", "input", "output", "max", "cached", "reasoning",
               "used", "remaining", "context", "num", "billed"}),
    frozenset({"count", "usage", "limit", "budget", "length", "type", "index"}),
)  # fmt: skip
_ORDINARY_NEIGHBOURS: Final[Mapping[str, tuple[frozenset[str], frozenset[str]]]] = {
    "token": _TOKEN_COUNT,
    "tok": _TOKEN_COUNT,
    "key": (
        frozenset({"sort", "cache", "partition", "primary", "foreign", "lookup", "natural",
                   "surrogate", "composite", "row", "group", "order", "dedup", "dedupe",
                   "idempotency", "unique", "index", "map", "range", "shard", "routing",
                   "translation", "i18n", "message", "object", "bucket", "dict", "join"}),
        frozenset(),
    ),
    "hash": (
        frozenset({"commit", "git", "file", "content", "blob", "tree", "block", "tx",
                   "transaction", "image", "object", "etag", "data", "document", "url",
                   "revision", "rev", "parent", "merge", "changeset", "chunk", "media", "asset",
                   "build", "source", "head", "perceptual", "checksum"}),
        frozenset(),
    ),
    "pass": (
        frozenset({"boarding", "season", "day", "first", "second", "single", "multi"}),
        frozenset({"rate", "count", "fail", "percent", "percentage", "ratio", "mark",
                   "threshold", "through", "number", "status"}),
    ),
    "auth": (frozenset(), frozenset({"type", "method", "provider", "mode", "kind", "scheme"})),
}  # fmt: skip

# The pieces a glued word is cut into (``pwhash``, ``privkey``, ``ccnum``, ``prompttokens``):
# every word above and the qualifiers that glue to them. A word that cuts into nothing but
# pieces is read as those words; ``keyword``, ``passenger`` or ``monkey`` do not cut.
_PIECES: Final = frozenset(
    {
        *_CREDENTIAL_WORDS, *_QUALIFIED, *(q for qs in _QUALIFIED.values() for q in qs),
        *_ORDINARY_NEIGHBOURS,
        *(n for pair in _ORDINARY_NEIGHBOURS.values() for side in pair for n in side),
        "priv", "private", "hmac", "signing", "wallet", "master", "refresh", "client", "api",
        "encryption", "license", "user", "db", "admin", "root", "app", "mot", "palavra",
    }
)  # fmt: skip
# Endings no ordinary word has, read as a credential whatever is glued before them
# (``userpassword``, ``keywordhash``, ``refreshtoken``).
_STRONG_ENDINGS: Final = (
    "password", "passwd", "passphrase", "pwd", "secret", "token", "credential", "hash",
    "passwort", "kennwort", "wachtwoord", "contrasena", "contraseña", "senha",
)  # fmt: skip
_STRONG_ENDING: Final = re.compile(f"(?:{'|'.join(_STRONG_ENDINGS)})s?[0-9]*\\Z")

# A name is cut at anything that is not a letter or digit, and before an upper-case letter
# that follows a lower-case one or a digit, or that starts a word after an acronym.
_WORD_BOUNDARY: Final = re.compile(r"[\W_]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Han, kana and Hangul are written without spaces: there a credential word is looked for
# anywhere in the name (``用户密码``).
_UNSPACED: Final = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_UNSPACED_WORDS: Final = tuple(w for w in _CREDENTIAL_WORDS if _UNSPACED.search(w))
_MAX_CUT: Final = 64


def _base(word: str) -> str:
    """``word`` without a trailing number or plural ``s`` when what is left is a word above."""
    stripped = word.rstrip("0123456789") or word
    if stripped.endswith("s") and stripped[:-1] in _PIECES:
        return stripped[:-1]
    return stripped


def _cut(word: str) -> list[str]:
    """``word`` as the pieces it is glued from, or as itself when it is no run of pieces."""
    base = _base(word)
    if base in _PIECES or len(word) > _MAX_CUT:
        return [base]
    # ends[i]: a cut of word[:i] into pieces, the fewest first found.
    ends: dict[int, list[str]] = {0: []}
    for start in range(len(word)):
        if start not in ends:
            continue
        for stop in range(len(word), start, -1):
            piece = _base(word[start:stop])
            if stop not in ends and piece in _PIECES:
                ends[stop] = [*ends[start], piece]
    return ends.get(len(word), [base])


def _words(name: str) -> list[str]:
    decomposed = unicodedata.normalize("NFKD", name)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Me", "Cf"))
    # NFKD takes the tilde off ``contraseña``; both spellings are in the vocabulary.
    return [
        piece
        for word in _WORD_BOUNDARY.split(unicodedata.normalize("NFKC", kept))
        if word
        for piece in _cut(word.casefold())
    ]


def _credential_at(words: list[str], index: int) -> bool:
    word = words[index]
    before = words[index - 1] if index > 0 else ""
    after = words[index + 1] if index + 1 < len(words) else ""
    if word in _QUALIFIED:
        return before in _QUALIFIED[word]
    if word not in _CREDENTIAL_WORDS:
        return False
    ordinary_before, ordinary_after = _ORDINARY_NEIGHBOURS.get(word, (frozenset(), frozenset()))
    return before not in ordinary_before and after not in ordinary_after


def names_a_credential(name: str) -> bool:
    """Whether ``name`` (a column, a key, a variable) is named with a credential word.

    The name is cut into words at separators and camelCase; a word glued from known pieces
    (``pwhash``, ``ccnum``) is read as those pieces. A word names a credential alone
    (``password``, ``senha``, ``пароль``), after its qualifier (``access_code``), or unless an
    ordinary neighbour makes it ordinary (``prompt_tokens``, ``sort_key``). A word ending in
    ``password``, ``token``, ``secret`` or ``hash`` does whatever is glued before the ending.
    """
    if any(word in name for word in _UNSPACED_WORDS):
        return True
    words = _words(name)
    if any(_credential_at(words, index) for index in range(len(words))):
        return True
    return any(
        _STRONG_ENDING.search(word) is not None
        and _STRONG_ENDING.match(word) is None
        and len(_cut(word)) == 1
        for word in words
    )
