"""Gates still to run after their reply, kept in the store so that none is lost in a crash.

`ask_with_memory_async()` (memorybook/wrapper.py) replies before its gate has decided whether
to keep the memory. Before the reply it records the memory here (`record_gate()`): a row of
the pending table, sealed as a memory is, in the same database. The gate's verdict settles it
(`settle_gate()`): the memory's save and the row's deletion are one transaction, and a row
already gone (settled elsewhere, or erased with its customer) saves nothing. So a memory is
saved at most once, whoever runs its gate.

The store object that records a gate owns it while it is open; on PostgreSQL it holds an
advisory lock while alive, on SQLite a byte of a lock file (memorybook/store/lock_file.py), and
the database or the kernel lets go of either when its process ends, however it ends. A gate
whose owner is gone is abandoned: `claim_abandoned_gates()` makes it the claimant's, one
claimant only, and a gate whose owner is alive is never claimed.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol, runtime_checkable

from memorybook.store.encryption import PENDING_AAD
from memorybook.store.schema import PENDING_TABLE
from memorybook.store.validation import (
    UnreadableMemory,
    checked_customer_id,
    checked_memory_json,
    shown,
)

_PENDING_AAD = PENDING_AAD  # what a pending row is sealed bound to, besides its customer's digest


class PendingGate(NamedTuple):
    """A gate recorded in the store: its row, and the memory it decides on."""

    id: int
    customer_id: str
    memory: dict


@runtime_checkable
class GateRecords(Protocol):
    """What a process that runs gates after their replies keeps in a store besides memories:
    each gate until its verdict, claimed once its owner is gone; and, where only one process
    may serve the store (SQLite), that this one does (``serving_alone()``). Turns across the
    processes serving a PostgreSQL store: memorybook/store/turns.py."""

    def record_gate(self, customer_id: str, memory: dict) -> PendingGate: ...

    def settle_gate(self, gate: PendingGate, keep: bool) -> bool: ...

    def claim_abandoned_gates(self, customer_id: str) -> list[PendingGate]: ...

    def customers_with_abandoned_gates(self) -> list[str]: ...

    def has_pending_gates(self, customer_id: str) -> bool: ...

    def serving_alone(self) -> AbstractContextManager[None]: ...


class StoredGates:
    """The pending gates of an EncryptedStore (memorybook/store/base.py), which inherits them:
    a part of it kept in a module of its own, using its `_call()`, `_database` and keys."""

    _gate_owner_id: bytes | None = None

    def record_gate(self, customer_id: str, memory: dict) -> PendingGate:
        """Keep ``memory`` as a gate still to run for this customer, until `settle_gate()`.

        The memory is checked as `save()` checks it, and sealed; this store object owns the gate.
        """
        customer_id = checked_customer_id(customer_id)
        _, text = checked_memory_json(customer_id, memory)
        with self._call("record_gate()"):
            keys = self._open_keys()
            customer = keys.customer_digest(customer_id)
            owner = self._gate_owner()
            [(row_id,)] = self._database.run(
                f"INSERT INTO {PENDING_TABLE} (customer_digest, owner, sealed) VALUES (?, ?, ?)"
                " RETURNING id",
                (customer, owner, keys.seal(customer, _PENDING_AAD, text)),
            )
        return PendingGate(int(row_id), customer_id, memory)

    def settle_gate(self, gate: PendingGate, keep: bool) -> bool:
        """The gate's verdict: delete its row, and save its memory if ``keep``, in one
        transaction. False, saving nothing, when the row is gone already: another store object
        settled it, or the customer was erased since it was recorded."""
        customer_id = checked_customer_id(gate.customer_id)
        if keep:
            ticket_id, text = checked_memory_json(customer_id, gate.memory)
            with self._call("settle_gate()"):
                return self._save_checked(customer_id, ticket_id, text, None, gate.id) is not None
        with self._call("settle_gate()"):
            customer = self._open_keys().customer_digest(customer_id)
            with self._database.write_transaction(customer):
                return self._delete_gate(customer, gate.id)  # its bytes go at sweep()

    def claim_abandoned_gates(self, customer_id: str) -> list[PendingGate]:
        """Make this customer's abandoned gates (their owner is gone) this store object's, and
        return them, oldest first; run each and settle it. Gates of owners alive stay theirs.

        A row that cannot be read is deleted, and a line added to ``notices`` says so.
        """
        customer_id = checked_customer_id(customer_id)
        with self._call("claim_abandoned_gates()"):
            customer = self._open_keys().customer_digest(customer_id)
            me = self._gate_owner()
            owners = self._database.run(
                f"SELECT DISTINCT owner FROM {PENDING_TABLE}"
                " WHERE customer_digest = ? AND owner <> ?",
                (customer, me),
            )
            claimed = []
            for (owner,) in owners:
                with self._database.owner_gone(bytes(owner)) as gone:
                    if gone:  # only one claimant finds it gone at a time; the update is atomic
                        claimed += self._database.run(
                            f"UPDATE {PENDING_TABLE} SET owner = ?"
                            " WHERE owner = ? AND customer_digest = ? RETURNING id, sealed",
                            (me, bytes(owner), customer),
                        )
            return [
                PendingGate(int(row_id), customer_id, memory)
                for row_id, memory in self._opened_gates(customer_id, customer, sorted(claimed))
            ]

    def customers_with_abandoned_gates(self) -> list[str]:
        """The customers that have gates whose owner is gone, by their first such gate."""
        with self._call("customers_with_abandoned_gates()"):
            keys = self._open_keys()
            rows = self._database.run(
                f"SELECT owner, customer_digest, sealed FROM {PENDING_TABLE}"
                " WHERE owner <> ? ORDER BY id",
                (self._gate_owner(),),
            )
            gone: dict[bytes, bool] = {}
            customers: dict[bytes, str] = {}
            for owner, customer, sealed in rows:
                owner, customer = bytes(owner), bytes(customer)
                if owner not in gone:
                    with self._database.owner_gone(owner) as is_gone:
                        gone[owner] = is_gone
                if gone[owner] and customer not in customers:
                    try:
                        memory = keys.unseal(customer, _PENDING_AAD, sealed)
                        customers[customer] = memory["request"]["customer"]["id"]
                    except (UnreadableMemory, KeyError, TypeError):
                        continue  # claim_abandoned_gates() of no customer can open it
            return list(customers.values())

    def has_pending_gates(self, customer_id: str) -> bool:
        """Whether a gate of this customer is recorded and not yet settled, by any store object
        of any process, its owner alive or gone: a read with none needs to wait for no turn."""
        customer_id = checked_customer_id(customer_id)
        with self._call("has_pending_gates()"):
            customer = self._open_keys().customer_digest(customer_id)
            return bool(self._database.run(
                f"SELECT 1 FROM {PENDING_TABLE} WHERE customer_digest = ? LIMIT 1", (customer,)))

    # -- helpers -------------------------------------------------------------------

    def _gate_owner(self) -> bytes:
        """This store object's owner id, alive from its first gate until it is closed (its
        database lets go of the owner then: the gates it still owns are abandoned)."""
        if self._gate_owner_id is None:
            owner = os.urandom(16)
            self._database.hold_owner(owner)
            self._gate_owner_id = owner
        return self._gate_owner_id

    def _delete_gate(self, customer: bytes, gate_id: int) -> bool:
        """Inside a write transaction: delete a pending row; whether it was still there."""
        return bool(self._database.run(
            f"DELETE FROM {PENDING_TABLE} WHERE id = ? AND customer_digest = ? RETURNING id",
            (gate_id, customer),
        ))

    def _opened_gates(
        self, customer_id: str, customer: bytes, rows: list[tuple[int, bytes]]
    ) -> list[tuple[int, dict]]:
        """The memories of pending rows; a row that cannot be read is deleted, with a notice."""
        keys = self._open_keys()
        opened, unreadable = [], 0
        for row_id, sealed in rows:
            try:
                opened.append((row_id, keys.unseal(customer, _PENDING_AAD, sealed)))
            except UnreadableMemory:
                unreadable += 1
                with self._database.write_transaction(customer):
                    self._delete_gate(customer, row_id)
        if unreadable:
            self.notices.append(
                f"Deleted {unreadable} unreadable pending gate(s) of customer "
                f"{shown(customer_id)} in {self.location} (damaged outside memorybook): their "
                "memories cannot be saved."
            )
        return opened
