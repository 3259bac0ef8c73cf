"""Ed25519 keys of timeline owners: a private key file (PKCS#8 PEM, mode 0600) and the public key as 64 hex
digits, which is how timelines, proofs and ``--pubkey`` name it."""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgewise.errors import ConfigError


def generate(path: str) -> str:
    """A new private key written to ``path`` (created, never overwritten, readable by its owner only); returns
    the public key."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path} exists: keygen never overwrites a key (a timeline signed with it could no "
                          "longer be extended); choose another path or remove the file") from None
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())
    return public_hex(key.public_key())


def load_private(path: str) -> Ed25519PrivateKey:
    try:
        with open(path, "rb") as fh:
            key = serialization.load_pem_private_key(fh.read(), password=None)
    except FileNotFoundError:
        raise ConfigError(f"key file {path} not found (make one with `edgewise keygen {path}`)") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def public_hex(key: Ed25519PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def public_from_text(text: str) -> Ed25519PublicKey:
    """A public key from its 64 hex digits, or from a file holding them (or a PEM public key)."""
    text = text.strip()
    if len(text) != 64 and os.path.exists(text):
        with open(text, "rb") as fh:
            data = fh.read()
        if data.lstrip().startswith(b"-----BEGIN"):
            loaded = serialization.load_pem_public_key(data)
            if not isinstance(loaded, Ed25519PublicKey):
                raise ConfigError(f"{text} is not an Ed25519 public key")
            return loaded
        text = data.decode("ascii", "replace").strip()
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))
    except ValueError:
        raise ConfigError(f"{text[:80]!r} is not an Ed25519 public key (64 hex digits, or a file holding them)"
                          ) from None


def signature_holds(key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        key.verify(signature, message)
    except InvalidSignature:
        return False
    return True
