"""Token formats that :mod:`picobot.privacy.redaction` redacts, as data.

Each :class:`Rule` of :data:`TOKEN_RULES` is a PEM private key or one vendor's token
format, written from the vendor's documented token shape: a fixed prefix or structure,
then a body of a known alphabet and length. The engine applies them in this order,
before the rules that read a label (:mod:`picobot.privacy.redaction_context`), so a
more specific format must come before a looser one that would also match it
(``sk-ant-`` and ``sk-or-v1-`` before the generic ``sk-``).

Every pattern is written to scan in linear time: bodies are possessive (``++``,
``{n,}+``) and each pattern starts where a token starts (a look-behind refuses the
middle of a longer run), so a long run of token characters is not rescanned from every
position in it. ``hints`` are literals one of which every match contains: text holding
none of them skips the pattern (``hint_ignorecase`` for a label matched without case).
A group named ``secret`` marks the part that is replaced; without one the whole match
is. ``check``, if set, must accept the secret text too (a structural test a regular
expression cannot make, such as "base64 of ``user:password``").

Add a format here with a line for it in ``tests/privacy/corpora/secrets.jsonl``; the
corpus tests fail for a rule that has none.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["TOKEN_RULES", "Rule"]


class Rule(NamedTuple):
    """One redaction rule: a vendor token format here, or a context rule."""

    kind: str
    """The marker type: the secret becomes ``[REDACTED:<kind>]``."""
    pattern: str
    hints: tuple[str, ...]
    doc: str
    """The vendor's documented format, for docs/redaction.md."""
    hint_ignorecase: bool = False
    check: Callable[[str], bool] | None = None
    examples_stay: bool = True
    """Leave a match holding a mask (``xxxxx``, ``*****``) or an ellipsis: an example."""


def _is_basic_credentials(text: str) -> bool:
    """Whether ``text`` is base64 of ``user:password`` (a Docker ``auth`` entry)."""
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon and user and password and decoded.isprintable())


# Not preceded by a character that would make the match the middle of a longer token.
_START = r"(?<![A-Za-z0-9_])"
# Not followed by one that would continue it.
_END = r"(?![A-Za-z0-9_-])"

# GitLab's token prefixes are "gl" + one of these + "-".
_GITLAB_KINDS = ("pat", "dt", "rt", "ptt", "soat", "oas", "cbt", "ft", "imt", "agent", "ffct")

TOKEN_RULES: tuple[Rule, ...] = (
    Rule(
        "private_key",
        # A whole PEM block (or an armored OpenPGP "PRIVATE KEY BLOCK"); if the END line is
        # missing (a truncated paste), the header plus the header lines and base64 lines
        # after it. The body scan stops (possessively) at the next "-----", so many
        # unterminated headers cost linear, not quadratic, time.
        r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?:[^-]++|-(?!----))*+-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:\s*(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset):[^\r\n]*)*"
        r"(?:\s*[A-Za-z0-9+/=]{20,}(?:\s+[A-Za-z0-9+/=]{20,})*(?:\s+[A-Za-z0-9+/]{1,19}={1,2})?)?)",
        ("-----BEGIN",),
        "a PEM or armored OpenPGP private key block",
        # Even a paste cut short with "..." holds most of the key.
        examples_stay=False,
    ),
    Rule(
        "anthropic_key",
        rf"{_START}sk-ant-[A-Za-z0-9_-]{{20,}}+",
        ("sk-ant-",),
        "`sk-ant-` then the key (`sk-ant-api03-...`, `sk-ant-admin01-...`)",
    ),
    Rule(
        "openrouter_key",
        rf"{_START}sk-or-v1-[0-9a-f]{{64}}{_END}",
        ("sk-or-v1-",),
        "`sk-or-v1-` then 64 hex digits",
    ),
    Rule(
        "openai_key",
        rf"{_START}sk-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9][A-Za-z0-9_-]{{19,}}+",
        ("sk-",),
        "`sk-`, `sk-proj-`, `sk-svcacct-`, `sk-admin-` then 20 or more characters",
    ),
    Rule(
        "groq_key",
        # Keys as issued have 52; older documentation shows 48.
        rf"{_START}gsk_[A-Za-z0-9]{{48,56}}{_END}",
        ("gsk_",),
        "`gsk_` then 52 letters and digits (48 to 56 are taken)",
    ),
    Rule(
        "xai_key",
        rf"{_START}xai-[A-Za-z0-9]{{80}}{_END}",
        ("xai-",),
        "`xai-` then 80 letters and digits",
    ),
    Rule(
        "huggingface_token",
        rf"{_START}hf_[A-Za-z0-9]{{34}}{_END}",
        ("hf_",),
        "`hf_` then 34 letters (digits are accepted too)",
    ),
    Rule(
        "stripe_key",
        rf"{_START}(?:[rs]k_(?:live|test)_[A-Za-z0-9]{{16,}}+|whsec_[A-Za-z0-9+/]{{24,}}+=*)",
        ("k_live_", "k_test_", "whsec_"),
        "secret `sk_live_`/`sk_test_`, restricted `rk_live_`/`rk_test_`, webhook signing"
        " secret `whsec_`",
    ),
    Rule(
        "github_token",
        rf"{_START}(?:gh[pousr]_[A-Za-z0-9]{{36,}}+|github_pat_[A-Za-z0-9_]{{40,}}+)",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        "`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` then 36 characters; fine-grained `github_pat_`",
    ),
    Rule(
        "gitlab_token",
        rf"{_START}gl(?:{'|'.join(_GITLAB_KINDS)})-"
        r"[A-Za-z0-9_-]{20,}+(?:\.[A-Za-z0-9_-]++)*+",
        tuple(f"gl{kind}-" for kind in _GITLAB_KINDS),
        "`glpat-` (personal), `gldt-` (deploy), `glrt-` (runner), `glptt-`, `glcbt-`,"
        " `glsoat-`, `gloas-`, `glft-`, `glimt-`, `glagent-`, `glffct-` then 20 or more"
        " characters",
    ),
    Rule(
        "npm_token",
        rf"{_START}npm_[A-Za-z0-9]{{36}}{_END}",
        ("npm_",),
        "`npm_` then 36 letters and digits",
    ),
    Rule(
        "pypi_token",
        rf"{_START}pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{{50,}}+",
        ("pypi-AgEIcHlwaS5vcmc",),
        "`pypi-AgEIcHlwaS5vcmc` (a macaroon for pypi.org) then the rest of the macaroon",
    ),
    Rule(
        "slack_token",
        rf"{_START}(?:(?:xoxe\.)?xox[abcdeoprs]-|xapp-\d-)[A-Za-z0-9-]{{10,}}+",
        ("xox", "xapp-"),
        "bot `xoxb-`, user `xoxp-`, refresh `xoxe-`, rotated `xoxe.xoxp-`, app-level `xapp-`"
        " and the other `xox?-` tokens",
    ),
    Rule(
        "slack_token",
        r"\bhttps?://hooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<secret>[A-Za-z0-9][A-Za-z0-9_/-]*+)",
        ("hooks.slack.com",),
        "the path of an incoming webhook `https://hooks.slack.com/services/T.../B.../...`",
    ),
    Rule(
        "discord_token",
        # The first part is the bot's numeric id in base64, so its first four
        # characters come from the base64 of ASCII digits.
        r"(?<![A-Za-z0-9_.-])[MNO][DTjz][AEIMQUYcgk][w-z0-5][A-Za-z0-9_-]{20,24}"
        r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}(?![A-Za-z0-9_.-])",
        tuple(a + b for a in "MNO" for b in "DTjz"),
        "bot token: base64 of the bot's id, `.`, 6 characters, `.`, 27 to 38 characters",
    ),
    Rule(
        "discord_token",
        r"\bhttps://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/webhooks/\d++/"
        r"(?P<secret>[A-Za-z0-9_-]{60,}+)",
        ("discord",),
        "the token of a webhook `https://discord.com/api/webhooks/<id>/<token>`",
    ),
    Rule(
        "telegram_bot_token",
        r"(?<![0-9])\d{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])",
        (":AA",),
        "the bot's numeric id, `:`, then 35 characters starting `AA`",
    ),
    Rule(
        "meta_access_token",
        r"(?<![A-Za-z0-9+/_-])EAA[A-Za-z0-9]{60,}+",
        ("EAA",),
        "Facebook/Instagram/WhatsApp Graph API access token: `EAA` then the token",
    ),
    Rule(
        "sendgrid_key",
        rf"{_START}SG\.[A-Za-z0-9_-]{{22}}\.[A-Za-z0-9_-]{{43}}{_END}",
        ("SG.",),
        "`SG.`, a 22-character id, `.`, a 43-character secret",
    ),
    Rule(
        "twilio_key",
        r"(?<![A-Za-z0-9])SK[0-9a-f]{32}(?![A-Za-z0-9])",
        ("SK",),
        "API key SID: `SK` then 32 lower-case hex digits",
    ),
    Rule(
        "mailgun_key",
        r"(?<![A-Za-z0-9_-])key-[0-9a-f]{32}(?![A-Za-z0-9])",
        ("key-",),
        "private API key: `key-` then 32 hex digits",
    ),
    Rule(
        "aws_access_key",
        # Followed by anything but an upper-case letter or digit: "AKIA..._backup",
        # "AKIA...EXAMPLEkey" still end the id.
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        "access key id: `AKIA` (long-term), `ASIA` (temporary), `ABIA`, `ACCA` then 16"
        " upper-case letters and digits",
    ),
    Rule(
        # Only when labelled: a bare 40-character base64 string is far too common.
        "aws_secret_key",
        r"(?<![A-Za-z0-9])(?i:aws_?secret_?(?:access_?)?key)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("aws",),
        "secret access key: 40 base64 characters, only after an `aws_secret_access_key` label",
        hint_ignorecase=True,
    ),
    Rule(
        "google_api_key",
        r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])",
        ("AIza",),
        "`AIza` then 35 characters",
    ),
    Rule(
        "google_oauth_secret",
        rf"{_START}GOCSPX-[A-Za-z0-9_-]{{28}}{_END}",
        ("GOCSPX-",),
        "OAuth client secret: `GOCSPX-` then 28 characters",
    ),
    Rule(
        "azure_client_secret",
        r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
        ("Q~",),
        "Entra ID (Azure AD) client secret: 3 characters, a digit, `Q~`, 31 to 34 characters",
    ),
    Rule(
        "azure_storage_key",
        r"(?<![A-Za-z0-9])(?:Account|SharedAccess)Key=(?P<secret>[A-Za-z0-9+/]{20,}+={0,2})",
        ("Key=",),
        "the `AccountKey=` (storage) or `SharedAccessKey=` (Service Bus, Event Hubs) of a"
        " connection string",
    ),
    Rule(
        "url_signature",
        r"(?<![A-Za-z0-9_-])(?:sig|X-Amz-Signature|X-Goog-Signature)="
        r"(?P<secret>[A-Za-z0-9%+/_-]{20,}+=*)",
        ("sig=", "Signature="),
        "the signature of a pre-signed URL: Azure SAS `sig=`, S3 `X-Amz-Signature=`,"
        " GCS `X-Goog-Signature=`",
    ),
    Rule(
        "docker_auth",
        r"\"auth\"[ \t]*:[ \t]*\"(?P<secret>[A-Za-z0-9+/]{8,}+={0,2})\"",
        ('"auth"',),
        'Docker `config.json` `"auth": "<base64 of user:password>"`',
        check=_is_basic_credentials,
    ),
    Rule(
        "digitalocean_token",
        rf"{_START}do[opr]_v1_[0-9a-f]{{64}}{_END}",
        ("_v1_",),
        "personal `dop_v1_`, OAuth `doo_v1_`, refresh `dor_v1_` then 64 hex digits",
    ),
    Rule(
        "shopify_token",
        rf"{_START}shp(?:at|ca|pa|ss)_[0-9a-fA-F]{{32}}{_END}",
        ("shp",),
        "admin `shpat_`, custom app `shpca_`, private app `shppa_`, shared secret `shpss_`"
        " then 32 hex digits",
    ),
    Rule(
        "vault_token",
        rf"{_START}hv[sb]\.[A-Za-z0-9_-]{{90,}}+",
        ("hvs.", "hvb."),
        "HashiCorp Vault service `hvs.` and batch `hvb.` tokens (90 or more characters)",
    ),
    Rule(
        "age_secret_key",
        r"AGE-SECRET-KEY-1[02-9ACDEFGHJKLMNPQRSTUVWXYZ]{58}",
        ("AGE-SECRET-KEY-1",),
        "`AGE-SECRET-KEY-1` then 58 upper-case bech32 characters",
    ),
    Rule(
        # Starts only where a base64url run starts, so a long run of "eyJ..-eyJ.." is
        # scanned once rather than once per "eyJ" (quadratic).
        "jwt",
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+",
        ("eyJ",),
        "three base64url parts, the first two (header and claims) starting `eyJ`",
    ),
)
