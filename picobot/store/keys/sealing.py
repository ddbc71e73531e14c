"""Sealing stored text with its owner's key, and opening it again.

A sealed text is bytes: a version byte, the 8-byte key id, a 12-byte random nonce,
then the AES-GCM ciphertext and tag; the first 9 bytes are authenticated too. The
store seals in SQL (``picobot_seal(user_id, text)``) and opens in SQL
(``picobot_open(column)``), functions :mod:`picobot.store.connect` installs on every
connection, so a statement reads and writes plaintext exactly as before. A text
whose key is gone (its user was purged) opens as :data:`ERASED`; a text stored in
clear (a database not yet migrated, or opened without a key store) opens as itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cryptography.exceptions import InvalidTag

from picobot.store.keys.keyring import SHARED, KeyRing

VERSION = 1
"""The first byte of a sealed text."""
BYTES_VERSION = 2
"""The first byte of sealed bytes (a vector)."""
CHUNK_VERSION = 3
"""The first byte of a sealed chunk of a file (an export waiting to be sent)."""
_HEADER = 9
_NONCE = 12
_TAG = 16
SEALED_OVERHEAD = _HEADER + _NONCE + _TAG
"""Bytes sealing adds to what it seals."""
ERASED = "[erased]"
"""What a sealed text reads as once its key was deleted."""
NAME_TAG = b"picobot-name\x00"
"""What an HMAC of a name starts with: a tag is never an index term's HMAC."""
PLAIN_TERMS = "plain"
"""The index-terms scheme without a key store (words in clear, prefixed per user)."""


class Sealer:
    """Seals and opens texts with the key ring's user keys; without a ring, a no-op.

    Thread-safe (the ring is): the functions run in each connection's own thread.
    """

    def __init__(self, ring: KeyRing | None = None) -> None:
        self.ring = ring

    @property
    def keyed(self) -> bool:
        """Whether texts are sealed (a key store is open)."""
        return self.ring is not None

    @property
    def terms_scheme(self) -> str:
        """How the recall index's terms are made: recorded so a change rebuilds it."""
        return PLAIN_TERMS if self.ring is None else f"keyed:{self.ring.store_id}"

    def seal(self, user_id: str | None, text: str | None) -> str | bytes | None:
        """``text`` sealed with ``user_id``'s key (the shared key for None).

        The empty text stays empty: it says nothing, and the store tests for it
        (a digest emptied until it is rebuilt).
        """
        if text is None or self.ring is None or text == "":
            return text
        return self._seal(VERSION, user_id, str(text).encode("utf-8", "surrogatepass"))

    def seal_bytes(self, user_id: str | None, data: bytes | None) -> bytes | None:
        """``data`` (a vector) sealed with ``user_id``'s key; as is without a key store."""
        if data is None or self.ring is None:
            return data
        return self._seal(BYTES_VERSION, user_id, bytes(data))

    def open(self, value: object) -> str | None:
        """The text of a stored value: opened if sealed, :data:`ERASED` if its key is gone.

        The empty text, stored as it is (:meth:`seal`), is empty bytes in a PostgreSQL
        ``BYTEA`` column: it opens as the empty text.
        """
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, bytes | bytearray | memoryview):
            return str(value)
        if not value:
            return ""
        plain = self._open(VERSION, bytes(value))
        return ERASED if plain is None else plain.decode("utf-8", "surrogatepass")

    def open_bytes(self, value: object) -> bytes | None:
        """The bytes of a stored value sealed by :meth:`seal_bytes`; None if its key is gone.

        Vectors stored without sealing (no key store when written) come back as they
        are: they are float16 arrays (an even length), and sealing adds 37 bytes (an odd
        length).
        """
        if not isinstance(value, bytes | bytearray | memoryview):
            return None
        blob = bytes(value)
        if not blob or blob[0] != BYTES_VERSION or len(blob) % 2 == 0:
            return blob
        return self._open(BYTES_VERSION, blob)

    def seal_chunk(self, user_id: str, data: bytes) -> bytes:
        """A chunk of a file sealed with ``user_id``'s key (a key store must be open)."""
        return self._seal(CHUNK_VERSION, user_id, data)

    def open_chunk(self, blob: bytes) -> bytes | None:
        """The bytes of a chunk sealed by :meth:`seal_chunk`; None if its key is gone."""
        return self._open(CHUNK_VERSION, blob)

    def _seal(self, version: int, user_id: str | None, plain: bytes) -> bytes:
        assert self.ring is not None
        key = self.ring.key(SHARED if user_id is None else str(user_id))
        header = bytes([version]) + key.kid.to_bytes(8, "big")
        nonce = secrets.token_bytes(_NONCE)
        return header + nonce + key.aead.encrypt(nonce, plain, header)

    def _open(self, version: int, blob: bytes) -> bytes | None:
        if self.ring is None or len(blob) < _HEADER + _NONCE + _TAG or blob[0] != version:
            return None
        key = self.ring.by_kid(int.from_bytes(blob[1:_HEADER], "big"))
        if key is None:
            return None
        try:
            return key.aead.decrypt(
                blob[_HEADER : _HEADER + _NONCE], blob[_HEADER + _NONCE :], blob[:_HEADER]
            )
        except InvalidTag:
            return None

    def refresh(self) -> None:
        """Forget cached keys if another process changed the key store (see
        :meth:`KeyRing.refresh`); the database calls it as each batch of reads or writes
        begins."""
        if self.ring is not None:
            self.ring.refresh()

    def forget(self, user_id: str) -> bool:
        """Delete ``user_id``'s key: all they had sealed is unreadable from now on.

        Whether they had one (False without a key store).
        """
        return self.ring is not None and self.ring.forget(user_id)

    def tag(self, user_id: str | None, name: str | None) -> str | bytes | None:
        """The lookup tag of ``user_id``'s ``name`` (a note's key, a fact's subject).

        A name a user looks things up by is stored twice: sealed (:meth:`seal`) to be
        shown, and as this tag to be found and kept unique. The tag is an HMAC-SHA256
        of the name under the user's term key: the same name gives the same 32 bytes,
        and without the key nothing tells which name it was. Callers pass the name as
        the store keeps it (a validated key, a normalized subject). Without a key store
        the tag is the name itself, stored in clear as before.
        """
        if name is None or self.ring is None:
            return name
        key = self.terms_key(user_id)
        assert key is not None
        return hmac.digest(
            key, NAME_TAG + str(name).encode("utf-8", "surrogatepass"), hashlib.sha256
        )

    def terms_key(self, user_id: str | None) -> bytes | None:
        """The HMAC key of ``user_id``'s index terms; None without a key store."""
        if self.ring is None:
            return None
        return self.ring.key(SHARED if user_id is None else str(user_id)).terms


def tag_matches(tag: str, name: str, owner: str, value: str) -> str:
    """SQL true for the row whose name (column ``name``, sealed) is ``value`` of
    ``owner``: its ``tag`` column holds the lookup tag of ``value`` (:meth:`Sealer.tag`),
    or its name is still in clear (a row written before per-user keys, until ``picobot
    migrate`` seals it). ``owner`` and ``value`` are SQL (a column, a parameter); a NULL
    ``value`` finds the rows without a name.
    """
    return f"({tag} = picobot_tag({owner}, {value}) OR {name} IS {value})"
