"""`sandbox-kernel approvals`: list the lasting approvals people gave at 'ask' prompts, and revoke them."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sandbox_kernel.skills.grants import GrantStore, GrantStoreError


def listing(folder: Path | None) -> int:
    """Every store in the folder with its grants (live and expired); a store that fails its seal is named."""
    stores = GrantStore.every(folder)
    if not stores:
        where = folder if folder is not None else "the kernel's data folder"
        print(f"No lasting approvals in {where}.")
        return 0
    now = time.time()
    for store in stores:
        print(f"{store.path}:")
        try:
            grants = store.grants()
        except GrantStoreError as exc:
            print(f"  refused: {exc}")
            continue
        for grant in grants:
            print(f"  {grant.described(now)}")
        if not grants:
            print("  (none)")
    return 0


def revoke(folder: Path | None, grant_id: str | None) -> int:
    """Revoke one grant by its id, or (None) every store in the folder; the next call asks again."""
    removed = []
    for store in GrantStore.every(folder):
        try:
            removed += store.revoke(grant_id)
        except GrantStoreError as exc:
            print(f"sandbox-kernel approvals: {exc}", file=sys.stderr)
            return 1
    if grant_id is not None and not removed:
        print(f"sandbox-kernel approvals: no approval has the id {grant_id!r} (`sandbox-kernel approvals list` shows "
              "them)", file=sys.stderr)  # fmt: skip
        return 1
    for grant in removed:
        print(f"revoked {grant.id} {grant.target}")
    if grant_id is None:
        print("Every lasting approval is revoked.")
    return 0
