//! The small surface every transaction and read is written against.
//!
//! Transactions are ordinary Rust functions over a [`Tx`]; reads over a
//! [`Reader`]. Neither names a database: statements are `$N`-numbered SQL
//! strings, parameters travel as [`Args`] (a list of typed values), and
//! rows come back through the [`Row`] trait and are decoded by
//! [`FromRow`]. Each backend implements [`Exec`] (a connection inside a
//! transaction) and [`Read`] (its read pool) once, at the leaf
//! ([`super::sqlx_exec`]); nothing above it knows which one it runs on.

mod args;
mod row;

pub use args::{Arg, Args, Bind};
pub use row::{Col, Decode, FromRow, JsonRow, Row};

use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};

use crate::clock::Millis;
use crate::db::sql::Statements;
use crate::ledger::storage::{Result, StoreError};

/// What a fetch calls for each row, in order.
pub type Each<'e> = &'e mut (dyn FnMut(&dyn Row) -> Result<()> + Send);

/// A connection inside a write transaction: the only place a write runs.
pub trait Exec: Send {
    /// Runs a statement; the number of rows it changed.
    fn execute<'e>(&'e mut self, sql: &'e str, args: Args<'e>) -> BoxFuture<'e, Result<u64>>;
    /// Runs a statement and hands each row it returns to `each`.
    fn fetch<'e>(
        &'e mut self,
        sql: &'e str,
        args: Args<'e>,
        each: Each<'e>,
    ) -> BoxFuture<'e, Result<()>>;
}

/// A read pool: statements that only read, outside any transaction.
/// It offers no `execute`; on SQLite its connections also refuse writes
/// (`PRAGMA query_only`), so a write that bypasses the writer fails loudly.
pub trait Read: Send + Sync {
    /// Runs a read and streams its rows.
    fn stream<'e>(
        &'e self,
        sql: &'e str,
        args: Args<'e>,
    ) -> BoxStream<'e, Result<Box<dyn Row + 'static>>>;
}

/// A write transaction's view: its connection, the statements, and the time.
pub struct Tx<'t> {
    exec: &'t mut (dyn Exec + 't),
    /// Every statement, spelled for this backend.
    pub st: &'t Statements,
    /// The time bound into statements (`None`: PostgreSQL's own clock).
    pub now: Option<Millis>,
    /// This node's clock, for audit times and explanations.
    pub clock_now: Millis,
    backend: &'static str,
}

impl<'t> Tx<'t> {
    /// A transaction's view over a connection that is inside one.
    pub fn new(
        exec: &'t mut (dyn Exec + 't),
        st: &'t Statements,
        now: Option<Millis>,
        clock_now: Millis,
        backend: &'static str,
    ) -> Self {
        Self {
            exec,
            st,
            now,
            clock_now,
            backend,
        }
    }

    /// Runs a statement; the number of rows it changed.
    ///
    /// # Errors
    /// The database refused the statement.
    pub async fn execute(&mut self, sql: &str, args: Args<'_>) -> Result<u64> {
        self.exec.execute(sql, args).await
    }

    /// Every row a statement returns, decoded.
    ///
    /// # Errors
    /// The database refused the statement, or a row does not decode.
    pub async fn all<R: FromRow>(&mut self, sql: &str, args: Args<'_>) -> Result<Vec<R>> {
        let mut rows = Vec::new();
        let mut each = |row: &dyn Row| {
            rows.push(R::from_row(row)?);
            Ok(())
        };
        self.exec.fetch(sql, args, &mut each).await?;
        Ok(rows)
    }

    /// The first row a statement returns, if any.
    ///
    /// # Errors
    /// As [`Tx::all`].
    pub async fn optional<R: FromRow>(&mut self, sql: &str, args: Args<'_>) -> Result<Option<R>> {
        let mut first = None;
        let mut each = |row: &dyn Row| {
            if first.is_none() {
                first = Some(R::from_row(row)?);
            }
            Ok(())
        };
        self.exec.fetch(sql, args, &mut each).await?;
        Ok(first)
    }

    /// The one row a statement must return.
    ///
    /// # Errors
    /// As [`Tx::all`], or [`StoreError::Corrupt`] when it returns none.
    pub async fn one<R: FromRow>(&mut self, sql: &str, args: Args<'_>) -> Result<R> {
        self.optional(sql, args)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a statement returned no row".into()))
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The chaos crash point before a write commits (SQLite's group
    /// commit; nothing without the `chaos` feature).
    pub fn before_commit(&self) {
        crate::chaos::before_commit(self.backend);
    }
}

/// A read's view: the read pool, the statements, and the time.
#[derive(Clone, Copy)]
pub struct Reader<'r> {
    read: &'r dyn Read,
    /// Every statement, spelled for this backend.
    pub st: &'r Statements,
    /// The time bound into statements (`None`: PostgreSQL's own clock).
    pub now: Option<Millis>,
    /// This node's clock.
    pub clock_now: Millis,
}

impl<'r> Reader<'r> {
    /// A read's view over a pool.
    pub fn new(
        read: &'r dyn Read,
        st: &'r Statements,
        now: Option<Millis>,
        clock_now: Millis,
    ) -> Self {
        Self {
            read,
            st,
            now,
            clock_now,
        }
    }

    /// Every row a read returns, decoded.
    ///
    /// # Errors
    /// The database refused the statement, or a row does not decode.
    pub async fn all<R: FromRow>(&self, sql: &str, args: Args<'_>) -> Result<Vec<R>> {
        self.read
            .stream(sql, args)
            .and_then(|row| async move { R::from_row(row.as_ref()) })
            .try_collect()
            .await
    }

    /// The first row a read returns, if any.
    ///
    /// # Errors
    /// As [`Reader::all`].
    pub async fn optional<R: FromRow>(&self, sql: &str, args: Args<'_>) -> Result<Option<R>> {
        let mut rows = self.read.stream(sql, args);
        match rows.next().await {
            Some(row) => Ok(Some(R::from_row(row?.as_ref())?)),
            None => Ok(None),
        }
    }

    /// The one row a read must return.
    ///
    /// # Errors
    /// As [`Reader::all`], or [`StoreError::Corrupt`] when it returns none.
    pub async fn one<R: FromRow>(&self, sql: &str, args: Args<'_>) -> Result<R> {
        self.optional(sql, args)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a read returned no row".into()))
    }

    /// The rows of a read, decoded as they arrive (for scans too large to
    /// hold: audit verification, checkpoints).
    pub fn stream<R: FromRow + 'r>(
        &self,
        sql: &'r str,
        args: Args<'r>,
    ) -> BoxStream<'r, Result<R>> {
        self.read
            .stream(sql, args)
            .and_then(|row| async move { R::from_row(row.as_ref()) })
            .boxed()
    }
}
