"""Config sections of the chat channels and the HTTP server (see :mod:`.settings`)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from picobot.config.sections import EnvName, HttpUrl, Section

HOUR_SECS = 3600
"""Upper bound of the network deadlines: longer ones protect nothing."""
MAX_CONNECTIONS = 1_000_000
"""Upper bound of the connection caps, far above any open-file limit."""
MAX_FREE_MB = 1_048_576
"""Upper bound of the free space /readyz asks for (1 TiB)."""


def _url_path(value: str) -> str:
    if not re.fullmatch(r"/[^\s?#]*", value):
        raise ValueError("must be a URL path starting with / (no spaces, ? or #), e.g. /ws")
    return value


def _listen_host(value: str) -> str:
    # An empty host (an unset shell variable, say) makes asyncio listen on every interface.
    if not value.strip():
        raise ValueError(
            "must not be empty: an empty host listens on every interface; write 127.0.0.1"
            " for this machine only, or 0.0.0.0 (or ::) to listen everywhere on purpose"
        )
    if value != value.strip() or any(c.isspace() for c in value):
        raise ValueError("must be an address or host name without spaces")
    return value


ListenHost = Annotated[str, AfterValidator(_listen_host)]
"""The address a server binds: never empty, so "everywhere" is always written out."""


class TUISettings(Section):
    """The terminal chat UI."""

    user_name: str = Field(default="local", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """Local user name; the TUI's user id is tui:<user_name>."""


class WebSocketSettings(Section):
    """The WebSocket chat channel."""

    enabled: bool = False
    """Start the WebSocket channel with `picobot serve`."""
    host: ListenHost = "127.0.0.1"
    """Address to bind (0.0.0.0 or :: for every interface; never empty)."""
    port: int = Field(default=8765, ge=0, le=65535)
    """Port to bind (0 = any free port)."""
    path: Annotated[str, AfterValidator(_url_path)] = "/ws"
    """URL path of the WebSocket endpoint."""
    api_keys_env: EnvName = "PICOBOT_WS_API_KEYS"
    """Env var with comma-separated client keys; `key:identity` names the identity."""
    max_message_bytes: int = Field(default=65536, ge=256)
    """Largest client message accepted; larger closes nothing but gets an error event."""
    rate_limit_per_minute: int = Field(default=60, ge=1)
    """Messages an identity may send per minute, all its connections together (burst 10)."""
    ping_interval_secs: float = Field(default=20.0, gt=0)
    """Seconds between keepalive pings."""
    ping_timeout_secs: float = Field(default=20.0, gt=0)
    """A connection that does not answer a ping within this time is closed."""
    send_queue_size: int = Field(default=256, ge=1)
    """Events buffered for a slow client before its connection is closed."""
    max_connections: int = Field(default=256, ge=1, le=MAX_CONNECTIONS)
    """Connections open at once, handshakes included; more are answered 503 and closed.
    Together with [server] max_connections, keep it below the open-file limit (ulimit -n)."""
    max_connections_per_peer: int = Field(default=32, ge=0, le=MAX_CONNECTIONS)
    """Connections open at once from one IP address (0 = no cap, e.g. behind a proxy)."""
    handshake_timeout_secs: float = Field(default=10.0, gt=0, le=HOUR_SECS)
    """A connection must complete its opening handshake within this time, else it is closed."""


class McpSettings(Section):
    """The MCP server: PicoBot's memory for MCP clients (docs/integrations.md)."""

    enabled: bool = False
    """Serve MCP over streamable HTTP with `picobot serve` (`picobot mcp` is stdio, always)."""
    host: ListenHost = "127.0.0.1"
    """Address of the MCP HTTP listener (0.0.0.0 or :: for every interface; never empty)."""
    port: int = Field(default=8767, ge=0, le=65535)
    """Port of the MCP HTTP listener (0 = any free port)."""
    path: Annotated[str, AfterValidator(_url_path)] = "/mcp"
    """URL path of the MCP endpoint."""
    api_keys_env: EnvName = "PICOBOT_WS_API_KEYS"
    """Env var with the client keys (`key` or `key:identity`, as [channels.websocket]
    reads them); by default the WebSocket keys, so a key reaches the memory of the same
    user (ws:<identity> or ws:<key prefix>) in chat and over MCP."""
    rate_limit_per_minute: int = Field(default=120, ge=1)
    """Tool calls and resource reads one user may make per minute (burst 20), over HTTP
    and stdio alike."""
    max_sessions: int = Field(default=64, ge=1, le=10_000)
    """MCP sessions open at once on the HTTP listener; more are answered 503."""


class OpenAISettings(Section):
    """The OpenAI-compatible chat endpoint (/v1/chat/completions, /v1/models) for chat
    front ends such as Open WebUI and LibreChat; see docs/integrations.md."""

    enabled: bool = False
    """Start the endpoint with `picobot serve` (it takes the WebSocket channel's keys)."""
    host: ListenHost = "127.0.0.1"
    """Address to bind (0.0.0.0 or :: for every interface; never empty)."""
    port: int = Field(default=8766, ge=0, le=65535)
    """Port to bind (0 = any free port); the base URL is http://host:port/v1."""
    model_name: str = Field(default="picobot", pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")
    """The model id /v1/models lists and every answer names (whatever model the request names)."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest request body (clients send their whole history); larger gets 413."""
    max_message_bytes: int = Field(default=65536, ge=256)
    """Largest last user message (the only one PicoBot reads); larger gets 400."""
    rate_limit_per_minute: int = Field(default=60, ge=1)
    """Requests a key may make per minute (burst 10); more get 429 with Retry-After."""


class WhatsAppSettings(Section):
    """WhatsApp Cloud API webhook (/webhooks/whatsapp)."""

    enabled: bool = False
    """Accept WhatsApp webhooks."""
    verify_token_env: EnvName = "PICOBOT_WHATSAPP_VERIFY_TOKEN"
    """Env var with the verify token used in the GET subscription handshake."""
    app_secret_env: EnvName = "PICOBOT_WHATSAPP_APP_SECRET"
    """Env var with the app secret that signs webhook bodies (X-Hub-Signature-256)."""
    access_token_env: EnvName = "PICOBOT_WHATSAPP_ACCESS_TOKEN"
    """Env var with the access token used to send replies."""
    phone_number_id: str = ""
    """The business phone number id replies are sent from."""
    graph_base_url: HttpUrl = "https://graph.facebook.com/v21.0"
    """Base URL of the Graph API (an absolute http(s) URL, checked at load)."""
    allowed_senders: list[str] = Field(default_factory=list)
    """If set, only these wa_ids may chat (deny by default once configured)."""


class TelegramSettings(Section):
    """Telegram Bot API: a webhook (/webhooks/telegram) or long polling."""

    enabled: bool = False
    """Chat over Telegram (webhooks or long polling, as mode says)."""
    mode: Literal["webhook", "polling"] = "webhook"
    """How updates arrive: "webhook" (Telegram POSTs them to /webhooks/telegram, which
    needs a public HTTPS address) or "polling" (PicoBot asks getUpdates, which works
    behind NAT; it deletes a webhook set for the bot at start)."""
    secret_token_env: EnvName = "PICOBOT_TELEGRAM_SECRET_TOKEN"
    """Env var with the secret_token set in setWebhook (X-Telegram-Bot-Api-Secret-Token);
    needed in webhook mode only."""
    bot_token_env: EnvName = "PICOBOT_TELEGRAM_BOT_TOKEN"
    """Env var with the bot token used to send replies (and to poll)."""
    poll_timeout_secs: int = Field(default=30, ge=1, le=50)
    """Polling mode: how long one getUpdates call waits for an update (long polling)."""
    api_base_url: HttpUrl = "https://api.telegram.org"
    """Base URL of the Bot API (an absolute http(s) URL, checked at load)."""
    bot_username: str = Field(default="", pattern=r"^([A-Za-z0-9_]{5,32})?$")
    """The bot's username, without @: group commands for other bots are then ignored."""
    allowed_senders: list[str] = Field(default_factory=list)
    """If set, only these Telegram user ids may chat."""


class SlackSettings(Section):
    """Slack: the Events API webhook (/webhooks/slack) or Socket Mode."""

    enabled: bool = False
    """Chat over Slack (Events API webhooks or Socket Mode, as mode says)."""
    mode: Literal["webhook", "socket"] = "webhook"
    """How events arrive: "webhook" (Slack POSTs them to /webhooks/slack, which needs a
    public HTTPS address) or "socket" (Socket Mode: PicoBot opens a WebSocket to Slack,
    which works behind NAT)."""
    signing_secret_env: EnvName = "PICOBOT_SLACK_SIGNING_SECRET"
    """Env var with the signing secret (X-Slack-Signature v0); needed in webhook mode
    only."""
    app_token_env: EnvName = "PICOBOT_SLACK_APP_TOKEN"
    """Env var with the app-level token (xapp-..., scope connections:write); needed in
    socket mode only."""
    bot_token_env: EnvName = "PICOBOT_SLACK_BOT_TOKEN"
    """Env var with the bot token used for chat.postMessage."""
    api_base_url: HttpUrl = "https://slack.com/api"
    """Base URL of the Web API (an absolute http(s) URL, checked at load)."""
    allowed_senders: list[str] = Field(default_factory=list)
    """If set, only these `team:user` ids may chat."""


class GenericWebhookSettings(Section):
    """A generic signed JSON webhook (/webhooks/generic)."""

    enabled: bool = False
    """Accept generic webhooks."""
    secret_env: EnvName = "PICOBOT_GENERIC_WEBHOOK_SECRET"
    """Env var with the HMAC-SHA256 secret."""
    signature_header: str = "X-PicoBot-Signature"
    """Header carrying `sha256=<hex HMAC-SHA256>` of `<timestamp>.<raw body>` (of the raw
    body alone for a request without a timestamp, accepted only if require_timestamp is
    false); callbacks are signed the same way."""
    timestamp_header: str = "X-PicoBot-Timestamp"
    """Header carrying the signing time in Unix seconds; it is covered by the signature."""
    require_timestamp: bool = True
    """Refuse requests without a signed timestamp. Turn off only for a client that cannot
    send one yet: its captured requests can then be replayed once their de-duplication
    record is pruned (8 days); its callbacks are then signed over the body alone."""
    timestamp_tolerance_secs: int = Field(default=300, ge=1, le=3600)
    """How far a request's timestamp may be from our clock, either way (401 beyond)."""
    callback_url: str = ""
    """Where replies are POSTed as JSON {chat, user, text, in_reply_to}: an absolute http(s)
    URL, required when enabled (start-up fails without it)."""
    allowed_senders: list[str] = Field(default_factory=list)
    """If set, only these user names may chat."""


class WebhookSettings(Section):
    """Webhook channels, served on the [server] address."""

    max_body_bytes: int = Field(default=262144, ge=1024)
    """Largest webhook body accepted (413 above); a polled Telegram update or a Slack
    Socket Mode event larger than this (as JSON) is skipped, never stored."""
    max_message_age_secs: int = Field(default=604800, ge=60, le=604800)
    """WhatsApp and Telegram messages sent longer ago than this (by the time in their
    authenticated body) are acknowledged but dropped as replays; at most 7 days, the
    longest a platform redelivers."""
    whatsapp: WhatsAppSettings = WhatsAppSettings()
    """WhatsApp Cloud API."""
    telegram: TelegramSettings = TelegramSettings()
    """Telegram Bot API."""
    slack: SlackSettings = SlackSettings()
    """Slack Events API."""
    generic: GenericWebhookSettings = GenericWebhookSettings()
    """Generic signed webhook."""


class ChannelsSettings(Section):
    """Chat channels."""

    tui: TUISettings = TUISettings()
    """Terminal UI."""
    websocket: WebSocketSettings = WebSocketSettings()
    """WebSocket channel."""
    webhook: WebhookSettings = WebhookSettings()
    """Webhook channels."""
    mcp: McpSettings = McpSettings()
    """MCP server (the memory for MCP clients)."""
    openai: OpenAISettings = OpenAISettings()
    """OpenAI-compatible chat endpoint."""


class ServerSettings(Section):
    """The HTTP server for webhooks and the admin API."""

    host: ListenHost = "127.0.0.1"
    """Address to bind; loopback by default (0.0.0.0 or :: for every interface; never
    empty)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """Port to bind (0 = any free port)."""
    admin_api_keys_env: EnvName = "PICOBOT_ADMIN_API_KEYS"
    """Env var with comma-separated operator keys for the admin API."""
    enable_admin_api: bool = True
    """Serve the admin API (/api/v1, /metrics, /healthz, /readyz) when operator keys are set."""
    outbound_max_attempts: int = Field(default=8, ge=1)
    """Delivery attempts of a platform reply before it is marked failed; the waits between
    them double from 1 s up to 5 min, so 8 span about 2 minutes of outage, 20 about an hour."""
    shutdown_grace_secs: float = Field(default=10.0, ge=0)
    """How long `serve` lets in-flight turns finish on SIGINT/SIGTERM."""
    max_connections: int = Field(default=512, ge=1, le=MAX_CONNECTIONS)
    """Connections open at once; more are answered 503 and closed. Together with
    [channels.websocket] max_connections, keep it below the open-file limit (ulimit -n)."""
    max_connections_per_peer: int = Field(default=64, ge=0, le=MAX_CONNECTIONS)
    """Connections open at once from one IP address (0 = no cap; behind a reverse proxy
    every connection comes from the proxy)."""
    header_timeout_secs: float = Field(default=10.0, gt=0, le=HOUR_SECS)
    """A request's head (request line and headers) must arrive within this time of the
    connection or of its first byte, else 408 and the connection is closed."""
    body_timeout_secs: float = Field(default=30.0, gt=0, le=HOUR_SECS)
    """A request's body must arrive within this time of its head, else it is dropped."""
    keepalive_timeout_secs: float = Field(default=15.0, gt=0, le=HOUR_SECS)
    """An idle connection between requests is closed after this time."""
    admin_auth_max_failures: int = Field(default=10, ge=1, le=MAX_CONNECTIONS)
    """Failed admin API authentications allowed per IP address in a burst; past them the
    address gets 429 with Retry-After (its key is not even checked) and regains one try
    per admin_auth_window_secs / admin_auth_max_failures seconds."""
    admin_auth_window_secs: float = Field(default=60.0, gt=0, le=24 * HOUR_SECS)
    """The window of admin_auth_max_failures: that many failures per window at most."""
    ready_min_free_mb: int = Field(default=64, ge=0, le=MAX_FREE_MB)
    """/readyz answers 503 when the data directory's disk has less free space (MiB)."""
    enable_dashboard: bool = True
    """Serve the operator dashboard at /admin/ whenever the admin API is served (same keys)."""
    dashboard_session_idle_secs: float = Field(default=1800.0, gt=0, le=24 * HOUR_SECS)
    """A dashboard login ends after this long without a request."""
    dashboard_session_max_secs: float = Field(default=8 * HOUR_SECS, gt=0, le=7 * 24 * HOUR_SECS)
    """A dashboard login ends this long after it began, however active (the cookie's Max-Age)."""
    dashboard_secure_cookie: bool = False
    """Always mark the dashboard's cookie Secure (set this behind a TLS-terminating proxy);
    it is Secure anyway when the request itself came over TLS."""
    dashboard_sessions_per_key: int = Field(default=20, ge=1, le=1000)
    """Dashboard logins one admin key holds at once; a new login past it ends that key's
    oldest login (never another key's), so a flood of logins logs out nobody else."""
    admin_event_streams: int = Field(default=8, ge=1, le=1024)
    """Admin API event streams (/api/v1/events/stream) open at once; more get 503."""
    admin_event_streams_per_key: int = Field(default=4, ge=1, le=1024)
    """Event streams one admin key holds open at once; more from that key get 429."""
    admin_event_stream_write_timeout_secs: float = Field(default=30.0, gt=0, le=HOUR_SECS)
    """An event stream whose client has not taken a write within this time is closed, so a
    client that stops reading gives its slot back."""
