//! Savepoints in the caller's transaction: a step of a call that fails is undone without
//! ending the transaction, which stays the caller's to commit or roll back. Fixed names
//! suffice: PostgreSQL stacks savepoints of one name, so a tool that dispatches another
//! call in the same transaction nests cleanly.

use tokio_postgres::Transaction;

use crate::error::Result;

/// Around a whole call: undone when the store refuses a step, so that the transaction is
/// as it was before the call.
pub(crate) const CALL: Savepoint = Savepoint {
    open: "SAVEPOINT pg_idempotency_call",
    keep: "RELEASE SAVEPOINT pg_idempotency_call",
    undo: "ROLLBACK TO SAVEPOINT pg_idempotency_call; RELEASE SAVEPOINT pg_idempotency_call",
};

/// Around the tool's own writes: undone when the tool fails, so that its claim is left to
/// record the failure.
pub(crate) const TOOL: Savepoint = Savepoint {
    open: "SAVEPOINT pg_idempotency_tool",
    keep: "RELEASE SAVEPOINT pg_idempotency_tool",
    undo: "ROLLBACK TO SAVEPOINT pg_idempotency_tool; RELEASE SAVEPOINT pg_idempotency_tool",
};

pub(crate) struct Savepoint {
    open: &'static str,
    keep: &'static str,
    undo: &'static str,
}

impl Savepoint {
    pub(crate) async fn open(&self, tx: &Transaction<'_>) -> Result<()> {
        Ok(tx.batch_execute(self.open).await?)
    }
    pub(crate) async fn keep(&self, tx: &Transaction<'_>) -> Result<()> {
        Ok(tx.batch_execute(self.keep).await?)
    }
    pub(crate) async fn undo(&self, tx: &Transaction<'_>) -> Result<()> {
        Ok(tx.batch_execute(self.undo).await?)
    }
}
