//! The small surface every transaction and read is written against.
//!
//! Transactions are ordinary Rust functions over a [`Tx`]; reads over a
//! [`Reader`]. Neither names a database: statements are `$N`-numbered SQL
//! strings, parameters travel as [`Args`] (a list of typed values), and
//! rows come back through the [`Row`] trait and are decoded by
//! [`FromRow`]. Each backend implements [`Exec`] (a connection inside a
//! transaction) and [`Read`] (its read pool) once, at the leaf
//! ([`super::sqlx_exec`]); nothing above it knows which one it runs on.

use std::borrow::Cow;
use std::fmt;

use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use serde_json::{Map, Value};

use crate::clock::Millis;
use crate::db::sql::Statements;
use crate::ledger::storage::{Result, StoreError};

/// One statement parameter, typed so that a NULL keeps its SQL type.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg<'a> {
    /// `BIGINT` / `INTEGER`.
    Int(Option<i64>),
    /// `TEXT`.
    Text(Option<Cow<'a, str>>),
    /// `BYTEA` / `BLOB`.
    Bytes(Option<Cow<'a, [u8]>>),
    /// `BOOLEAN` (an integer on SQLite).
    Bool(Option<bool>),
    /// `DOUBLE PRECISION` / `REAL`.
    Float(Option<f64>),
}

/// The parameters of one statement, `$1` first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args<'a>(Vec<Arg<'a>>);

impl<'a> Args<'a> {
    /// No parameters yet.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Adds the next parameter.
    #[must_use]
    pub fn bind(mut self, value: impl Bind<'a>) -> Self {
        self.0.push(value.into_arg());
        self
    }

    /// Adds the next parameter in place (for statements built step by step).
    pub fn push(&mut self, value: impl Bind<'a>) {
        self.0.push(value.into_arg());
    }

    /// The number of parameters so far: the next one is `$len+1`.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The parameters, in order.
    pub fn into_inner(self) -> Vec<Arg<'a>> {
        self.0
    }
}

/// A value that can be a statement parameter.
pub trait Bind<'a> {
    /// The parameter.
    fn into_arg(self) -> Arg<'a>;
}

impl<'a> Bind<'a> for Arg<'a> {
    fn into_arg(self) -> Arg<'a> {
        self
    }
}

impl<'a> Bind<'a> for i64 {
    fn into_arg(self) -> Arg<'a> {
        Arg::Int(Some(self))
    }
}

impl<'a> Bind<'a> for Option<i64> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Int(self)
    }
}

impl<'a> Bind<'a> for &'a Option<i64> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Int(*self)
    }
}

impl<'a> Bind<'a> for bool {
    fn into_arg(self) -> Arg<'a> {
        Arg::Bool(Some(self))
    }
}

impl<'a> Bind<'a> for f64 {
    fn into_arg(self) -> Arg<'a> {
        Arg::Float(Some(self))
    }
}

impl<'a> Bind<'a> for &'a str {
    fn into_arg(self) -> Arg<'a> {
        Arg::Text(Some(Cow::Borrowed(self)))
    }
}

impl<'a> Bind<'a> for &'a String {
    fn into_arg(self) -> Arg<'a> {
        Arg::Text(Some(Cow::Borrowed(self)))
    }
}

impl<'a> Bind<'a> for String {
    fn into_arg(self) -> Arg<'a> {
        Arg::Text(Some(Cow::Owned(self)))
    }
}

impl<'a> Bind<'a> for Option<&'a str> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Text(self.map(Cow::Borrowed))
    }
}

impl<'a> Bind<'a> for Option<String> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Text(self.map(Cow::Owned))
    }
}

impl<'a> Bind<'a> for &'a Option<String> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Text(self.as_deref().map(Cow::Borrowed))
    }
}

impl<'a> Bind<'a> for &'a [u8] {
    fn into_arg(self) -> Arg<'a> {
        Arg::Bytes(Some(Cow::Borrowed(self)))
    }
}

impl<'a> Bind<'a> for Option<&'a [u8]> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Bytes(self.map(Cow::Borrowed))
    }
}

impl<'a> Bind<'a> for Vec<u8> {
    fn into_arg(self) -> Arg<'a> {
        Arg::Bytes(Some(Cow::Owned(self)))
    }
}

/// A column, by name or by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col<'a> {
    /// By name (statements name every column they return).
    Name(&'a str),
    /// By position, from 0 (tuples and scalars).
    At(usize),
}

impl fmt::Display for Col<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => write!(f, "column {name:?}"),
            Self::At(i) => write!(f, "column {i}"),
        }
    }
}

impl<'a> From<&'a str> for Col<'a> {
    fn from(name: &'a str) -> Self {
        Self::Name(name)
    }
}

impl From<usize> for Col<'_> {
    fn from(i: usize) -> Self {
        Self::At(i)
    }
}

/// One row a statement returned, read column by column.
pub trait Row: Send + Sync {
    /// An integer column.
    ///
    /// # Errors
    /// The column is missing or holds another type.
    fn int(&self, col: Col<'_>) -> Result<Option<i64>>;
    /// A text column.
    ///
    /// # Errors
    /// The column is missing or holds another type.
    fn text(&self, col: Col<'_>) -> Result<Option<String>>;
    /// A byte-string column.
    ///
    /// # Errors
    /// The column is missing or holds another type.
    fn bytes(&self, col: Col<'_>) -> Result<Option<Vec<u8>>>;
    /// A boolean column (an integer on SQLite).
    ///
    /// # Errors
    /// The column is missing or holds another type.
    fn boolean(&self, col: Col<'_>) -> Result<Option<bool>>;
    /// A floating-point column.
    ///
    /// # Errors
    /// The column is missing or holds another type.
    fn float(&self, col: Col<'_>) -> Result<Option<f64>>;
    /// Every column, by name, as JSON (the retention archive keeps rows
    /// whole, including columns later migrations add).
    fn to_json(&self) -> Map<String, Value>;
}

impl dyn Row + '_ {
    /// A column, decoded.
    ///
    /// # Errors
    /// The column is missing, NULL where `T` is not an `Option`, or of
    /// another type.
    pub fn get<'c, T: Decode>(&self, col: impl Into<Col<'c>>) -> Result<T> {
        T::decode(self, col.into())
    }
}

/// A value one column decodes to.
pub trait Decode: Sized {
    /// Reads the column.
    ///
    /// # Errors
    /// As [`Row::int`] and friends; NULL for a non-`Option` type.
    fn decode(row: &dyn Row, col: Col<'_>) -> Result<Self>;
}

fn not_null<T>(value: Option<T>, col: Col<'_>) -> Result<T> {
    value.ok_or_else(|| StoreError::Corrupt(format!("{col} is NULL")))
}

macro_rules! decode_via {
    ($($ty:ty => $get:ident),* $(,)?) => {$(
        impl Decode for $ty {
            fn decode(row: &dyn Row, col: Col<'_>) -> Result<Self> {
                not_null(row.$get(col)?, col)
            }
        }
        impl Decode for Option<$ty> {
            fn decode(row: &dyn Row, col: Col<'_>) -> Result<Self> {
                row.$get(col)
            }
        }
    )*};
}

decode_via!(i64 => int, String => text, Vec<u8> => bytes, bool => boolean, f64 => float);

/// A row decoded into a value.
pub trait FromRow: Sized + Send {
    /// Decodes the row.
    ///
    /// # Errors
    /// A column is missing or of another type, or holds a value no
    /// statement of ours writes.
    fn from_row(row: &dyn Row) -> Result<Self>;
}

impl<A: Decode + Send> FromRow for (A,) {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok((row.get(0)?,))
    }
}

impl<A: Decode + Send, B: Decode + Send> FromRow for (A, B) {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok((row.get(0)?, row.get(1)?))
    }
}

impl<A: Decode + Send, B: Decode + Send, C: Decode + Send> FromRow for (A, B, C) {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
    }
}

impl<A: Decode + Send, B: Decode + Send, C: Decode + Send, D: Decode + Send> FromRow
    for (A, B, C, D)
{
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
    }
}

/// A whole row as JSON, for the retention archive.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonRow(pub Map<String, Value>);

impl FromRow for JsonRow {
    fn from_row(row: &dyn Row) -> Result<Self> {
        Ok(Self(row.to_json()))
    }
}

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
