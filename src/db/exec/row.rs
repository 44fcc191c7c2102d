//! Rows as the transactions see them: [`Row`], [`Col`], [`Decode`], [`FromRow`].

use std::fmt;

use serde_json::{Map, Value};

use crate::ledger::storage::{Result, StoreError};

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
