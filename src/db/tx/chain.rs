//! Audit appends, inside the transaction of the move they record.
//!
//! Every statement that moves a run reserves the next sequence number of
//! its chain (`audit_seq + 1`) and returns the row; the entry is then
//! appended at that number, hashed onto the run's current head, and the
//! head moved to it, in one round trip. Run-less chains (kill-switch
//! changes, retention records) live under [`SYSTEM_NAMESPACE`] and chain
//! onto their own last entry.

use serde_json::Value;

use crate::audit::{AuditEntry, SYSTEM_NAMESPACE};
use crate::clock::Millis;
use crate::db::exec::{Args, Tx};
use crate::db::rows::RunRow;
use crate::db::sql::Statements;
use crate::ledger::storage::Result;
use crate::ledger::{Move, Run, RunState};

/// The parameters of one audit entry, in `INSERT_AUDIT` order.
fn entry_args<'a>(entry: &'a AuditEntry, prev: Option<&'a str>, hash: &'a str) -> Args<'a> {
    Args::new()
        .bind(&entry.namespace)
        .bind(&entry.key)
        .bind(entry.seq)
        .bind(&entry.kind)
        .bind(&entry.actor)
        .bind(&entry.from_state)
        .bind(&entry.to_state)
        .bind(entry.version)
        .bind(entry.detail.to_string())
        .bind(prev)
        .bind(hash)
        .bind(entry.created_at)
}

/// The audit entry for a move, its detail redacted, at the sequence number
/// the statement that returned `row` reserved.
pub(crate) fn audit_entry(
    tx: &Tx<'_>,
    row: &RunRow,
    run: &Run,
    kind: Move,
    actor: &str,
    mut detail: Value,
) -> AuditEntry {
    tx.st.redactor.value(run.namespace.as_str(), &mut detail);
    AuditEntry {
        namespace: run.namespace.to_string(),
        key: run.key.to_string(),
        seq: row.audit_seq,
        kind: kind.as_str().into(),
        actor: actor.into(),
        from_state: run.prev_state.map(|s| s.as_str().to_owned()),
        to_state: Some(run.state.as_str().to_owned()),
        version: Some(run.version.get()),
        detail,
        created_at: run.updated_at,
    }
}

/// Appends an audit entry at the sequence number the statement that
/// returned `row` reserved, and advances the run's chain head.
pub(crate) async fn append(tx: &mut Tx<'_>, row: &RunRow, entry: &AuditEntry) -> Result<()> {
    let prev = row.audit_head.as_deref();
    let hash = entry.chain_hash(prev);
    let st = tx.st;
    tx.execute(&st.runs.append_audit, entry_args(entry, prev, &hash))
        .await?;
    Ok(())
}

/// An audit entry hashed before its transaction reaches the writer: the
/// canonical JSON and SHA-256 of an entry cost more than the statements
/// that store it, and on SQLite everything inside a transaction runs one
/// after another on the writer's thread. Used when the move returns the
/// row that was foreseen; otherwise the entry is built and hashed as usual.
#[derive(Debug, Clone)]
pub(crate) struct Foreseen {
    entry: AuditEntry,
    prev: Option<String>,
    hash: String,
}

impl Foreseen {
    /// `entry` chained onto `prev`, its detail redacted as [`record`] would.
    pub(crate) fn new(st: &Statements, mut entry: AuditEntry, prev: Option<String>) -> Self {
        st.redactor.value(&entry.namespace, &mut entry.detail);
        let hash = entry.chain_hash(prev.as_deref());
        Self { entry, prev, hash }
    }

    /// The entry's hash (the chain head once it is appended).
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }

    /// The entry, its detail redacted.
    pub(crate) fn entry(&self) -> &AuditEntry {
        &self.entry
    }

    /// Whether the move returned the row this entry was foreseen for.
    fn fits(&self, row: &RunRow, run: &Run, kind: Move) -> bool {
        let e = &self.entry;
        e.kind == kind.as_str()
            && e.seq == row.audit_seq
            && row.audit_head.as_deref() == self.prev.as_deref()
            && e.version == Some(run.version.get())
            && e.from_state.as_deref() == run.prev_state.map(|s| s.as_str())
            && e.to_state.as_deref() == Some(run.state.as_str())
            && e.namespace == run.namespace.as_str()
            && e.key == run.key.as_str()
    }
}

/// Appends the foreseen entry when the move returned the row it was
/// foreseen for, else the entry for the move as [`record`] builds it.
pub(crate) async fn record_foreseen(
    tx: &mut Tx<'_>,
    row: &RunRow,
    run: &Run,
    kind: Move,
    foreseen: Option<&Foreseen>,
    actor: &str,
    detail: Value,
) -> Result<()> {
    match foreseen {
        Some(f) if f.fits(row, run, kind) && f.entry.actor == actor => {
            let st = tx.st;
            let args = entry_args(&f.entry, f.prev.as_deref(), &f.hash);
            tx.execute(&st.runs.append_audit, args).await?;
            Ok(())
        }
        _ => record(tx, row, run, kind, actor, detail).await,
    }
}

/// Appends the audit entry for a move and advances the chain head.
pub(crate) async fn record(
    tx: &mut Tx<'_>,
    row: &RunRow,
    run: &Run,
    kind: Move,
    actor: &str,
    detail: Value,
) -> Result<()> {
    let entry = audit_entry(tx, row, run, kind, actor, detail);
    append(tx, row, &entry).await
}

/// Audits an event that does not move the run, at the sequence number the
/// statement that returned `row` reserved (`touch`, `owner_touch`).
/// `from` is the state the entry names as before (`None`: unnamed).
pub(crate) async fn note(
    tx: &mut Tx<'_>,
    row: &RunRow,
    kind: &str,
    actor: &str,
    detail: Value,
    at: Millis,
    from: Option<RunState>,
) -> Result<Run> {
    let run = row.to_run()?;
    let entry = AuditEntry {
        namespace: run.namespace.to_string(),
        key: run.key.to_string(),
        seq: row.audit_seq,
        kind: kind.into(),
        actor: actor.into(),
        from_state: from.map(|s| s.as_str().to_owned()),
        to_state: Some(run.state.as_str().to_owned()),
        version: Some(run.version.get()),
        detail,
        created_at: at,
    };
    append(tx, row, &entry).await?;
    Ok(run)
}

/// Appends an event to a run-less chain (`oncegate / <key>`), chained onto
/// its last entry.
pub(crate) async fn append_system_event(
    tx: &mut Tx<'_>,
    key: &str,
    kind: &str,
    actor: &str,
    detail: Value,
    now: Millis,
) -> Result<()> {
    let st = tx.st;
    let last: Option<(i64, String)> = tx
        .optional(
            &st.audit.last_audit,
            Args::new().bind(SYSTEM_NAMESPACE).bind(key),
        )
        .await?;
    let (seq, prev) = last.map_or((1, None), |(seq, hash)| (seq + 1, Some(hash)));
    let entry = AuditEntry::unmoved(SYSTEM_NAMESPACE, key, seq, kind, actor, detail, now);
    let hash = entry.chain_hash(prev.as_deref());
    tx.execute(
        &st.audit.insert_audit,
        entry_args(&entry, prev.as_deref(), &hash),
    )
    .await?;
    Ok(())
}
