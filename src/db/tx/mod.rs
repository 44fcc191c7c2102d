//! The transactions and reads, as plain `async fn`s over [`Tx`] and
//! [`Reader`], one file per part, each with its port's implementation for
//! every [`Backend`](super::Backend).
//!
//! The shape every write follows: a function that takes `tx: &mut Tx<'_>`
//! and returns what the transaction decided ([`Finish`](super::Finish)),
//! run by `Db::write` (or `Db::commit` when it always commits) with its
//! arguments moved in. On SQLite the whole function runs on the
//! group-commit writer, inside a savepoint of the open batch; on
//! PostgreSQL inside a pool transaction. Reads that need no transaction
//! take a `&Reader<'_>`. Never begin a second write inside a write.
//!
//! [`Tx`]: super::exec::Tx
//! [`Reader`]: super::exec::Reader

pub(crate) mod admin;
pub(crate) mod approval;
pub(crate) mod audit;
pub(crate) mod chain;
pub(crate) mod deadletter;
pub(crate) mod deliveries;
pub(crate) mod gauges;
pub(crate) mod ingress;
pub(crate) mod jobs;
pub(crate) mod ledger;
pub(crate) mod outbox;
pub(crate) mod outputs;
pub(crate) mod proxy;
pub(crate) mod replace;
pub(crate) mod replay;
pub(crate) mod retention;
pub(crate) mod sessions;
pub(crate) mod tokens;

/// What an owner call found: its move done, or its lease no longer the
/// run's live one (nothing written).
#[derive(Debug)]
pub(crate) enum Owned<T> {
    /// The move was made.
    Done(T),
    /// The lease lost the run.
    Lost,
}

/// Serialises a batch or a list into the JSON a statement binds.
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(
    value: &T,
) -> crate::ledger::storage::Result<String> {
    serde_json::to_string(value).map_err(|e| {
        crate::ledger::storage::StoreError::Corrupt(format!("a value would not serialize: {e}"))
    })
}
