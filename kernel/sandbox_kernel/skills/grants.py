"""Lasting approvals of skill calls ("for N hours", "always"), each bound to the skill's code and the prompt shown.

A person's lasting answer becomes a grant in a private file (0600, in the kernel's data folder, one file per user
and configuration), sealed with HMAC-SHA256 under a key of its own (0600, beside it). A file edited or made by
anything but this module does not match its seal and is refused as a whole: no grant in it counts, and the caller
says so. A grant lets a call through only while it has not expired (an "hours" grant), has not been revoked (each
check reads the file, so a revocation stops the next call), and the skill's code still hashes to what was
approved; when the code changed, the person is asked again, told so. The guest never reaches this file: it is on
the host, outside every mount.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from sandbox_kernel import private_files

SCOPES = ("hours", "always")
KEY_BYTES = 32
PROMPT_CHARS = 2000  # of the prompt a grant keeps, to show in `sandbox-kernel approvals list`
MAX_GRANTS = 10_000  # a store holding more is refused (nothing this module writes gets there)
VERSION = 1


class GrantStoreError(Exception):
    """The store cannot be used; the message says which file, what is wrong and what to do."""


@dataclass(frozen=True)
class Grant:
    """A person's lasting yes to one `Skill.method`, for one version of its code."""

    id: str
    target: str  # Skill.method
    scope: str  # one of SCOPES
    code_sha256: str  # of the skill's code when it was approved: code_digest
    prompt: str  # what the person was shown (up to PROMPT_CHARS)
    granted_at: float  # seconds since the epoch
    expires_at: float | None  # None for "always"

    def live(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at

    def described(self, now: float) -> str:
        """One line for a listing: id, target, how long it lasts."""
        if self.expires_at is None:
            lasts = "always"
        elif self.live(now):
            lasts = f"{(self.expires_at - now) / 3600:.1f} h left"
        else:
            lasts = "expired"
        return f"{self.id}  {self.target}  {lasts}  (code sha256 {self.code_sha256[:16]})"


def code_digest(files: Iterable[Path]) -> str:
    """SHA-256 of a skill's code: each file's name and bytes, in name order."""
    digest = hashlib.sha256()
    for path in sorted({Path(p).resolve() for p in files}):
        data = path.read_bytes()
        digest.update(f"{path}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def store_name(configuration: str) -> str:
    """The store's file name for one configuration (e.g. the skills' folder and policy, as the caller states it)."""
    return f"approvals-{hashlib.sha256(configuration.encode()).hexdigest()[:16]}.json"


@dataclass(frozen=True)
class Decision:
    """What the store says of a call: the grant that lets it through, or why none does."""

    grant: Grant | None
    code_changed: bool = False  # a grant for the target exists, but for other code


class GrantStore:
    """The grants of one configuration: a store file in a folder that holds the key of every store in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.parent
        self.key_path = self.folder / "approvals.key"

    @classmethod
    def of(cls, configuration: str, folder: Path | None = None) -> GrantStore:
        """The store of `configuration` in `folder` (the kernel's data folder by default)."""
        return cls((folder if folder is not None else private_files.kernel_data_folder()) / store_name(configuration))

    @classmethod
    def every(cls, folder: Path | None = None) -> list[GrantStore]:
        """Every store in `folder` (the kernel's data folder by default), for listing and revoking."""
        found = folder if folder is not None else private_files.kernel_data_folder()
        return [cls(path) for path in sorted(found.glob("approvals-*.json"))]

    # -- reading and writing ---------------------------------------------------------------------------------------

    def _key(self) -> bytes:
        private_files.make_folders(self.folder)
        try:
            fd = private_files.create(self.key_path)
        except FileExistsError:
            key = self.key_path.read_bytes()
            if len(key) != KEY_BYTES:
                raise GrantStoreError(
                    f"{self.key_path} is not the approvals' key ({len(key)} bytes, not {KEY_BYTES}): remove it and "
                    f"{self.path} to start again with no lasting approvals"
                ) from None
            return key
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return key

    @staticmethod
    def _seal(key: bytes, grants: list[dict[str, object]]) -> str:
        body = json.dumps({"version": VERSION, "grants": grants}, sort_keys=True, separators=(",", ":"))
        return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        private_files.make_folders(self.folder)
        fd = os.open(self.folder / "approvals.lock", os.O_RDWR | os.O_CREAT, private_files.FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self, key: bytes) -> list[Grant]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise GrantStoreError(f"{self.path} cannot be read ({exc}): no lasting approval applies") from None
        refused = (
            f"{self.path} does not match its seal (HMAC-SHA256 under {self.key_path}): it was changed outside "
            f"sandbox-kernel, so no approval in it applies. `sandbox-kernel approvals revoke --all` removes it"
        )
        try:
            stored = json.loads(text)
            grants = stored["grants"]
            seal = stored["seal"]
        except (ValueError, TypeError, KeyError):
            raise GrantStoreError(refused) from None
        if (
            not isinstance(grants, list)
            or len(grants) > MAX_GRANTS
            or not isinstance(seal, str)
            or stored.get("version") != VERSION
            or not hmac.compare_digest(seal, self._seal(key, grants))
        ):
            raise GrantStoreError(refused)
        try:
            return [Grant(**g) for g in grants]
        except TypeError:
            raise GrantStoreError(refused) from None

    def _write(self, key: bytes, grants: list[Grant]) -> None:
        rows = [asdict(g) for g in grants]
        text = json.dumps({"version": VERSION, "grants": rows, "seal": self._seal(key, rows)}, indent=1)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.part")
        partial.unlink(missing_ok=True)
        fd = private_files.create(partial)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            partial.replace(self.path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    # -- what callers use ------------------------------------------------------------------------------------------

    def grants(self) -> list[Grant]:
        """Every grant stored, live or not; GrantStoreError if the file is not this module's."""
        with self._locked():
            return self._read(self._key())

    def decision(self, target: str, code_sha256: str, now: float) -> Decision:
        """The live grant for `target` and this code, if there is one; GrantStoreError as grants()."""
        live = [g for g in self.grants() if g.target == target and g.live(now)]
        for grant in live:
            if hmac.compare_digest(grant.code_sha256, code_sha256):
                return Decision(grant)
        return Decision(None, code_changed=bool(live))

    def grant(self, target: str, scope: str, code_sha256: str, prompt: str, now: float, hours: float = 0) -> Grant:
        """Store a person's lasting yes (replacing earlier grants for the target); the new grant."""
        if scope not in SCOPES:
            raise ValueError(f"scope {scope!r}: one of {', '.join(SCOPES)}")
        if scope == "hours" and not 0 < hours <= 24 * 366:
            raise ValueError(f"hours {hours!r}: more than 0, at most {24 * 366}")
        made = Grant(
            id=secrets.token_hex(6),
            target=target,
            scope=scope,
            code_sha256=code_sha256,
            prompt=prompt[:PROMPT_CHARS],
            granted_at=now,
            expires_at=now + hours * 3600 if scope == "hours" else None,
        )
        with self._locked():
            key = self._key()
            kept = [g for g in self._read(key) if g.target != target and g.live(now)]
            self._write(key, [*kept, made])
        return made

    def revoke(self, grant_id: str | None) -> list[Grant]:
        """Remove one grant by its id, or (None) every grant and a store that does not match its seal; the removed."""
        with self._locked():
            key = self._key()
            if grant_id is None:
                try:
                    removed = self._read(key)
                except GrantStoreError:
                    removed = []
                self.path.unlink(missing_ok=True)
                return removed
            grants = self._read(key)
            removed = [g for g in grants if g.id == grant_id]
            if removed:
                self._write(key, [g for g in grants if g.id != grant_id])
            return removed
