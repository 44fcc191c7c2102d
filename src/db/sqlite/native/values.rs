//! Between rusqlite and the executor: parameters bound to a statement, and
//! rows read out of one into owned values.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rusqlite::types::Value as SqlValue;
use serde_json::{Map, Value};

use crate::db::exec::{Arg, Col, Row};
use crate::ledger::storage::{Result, StoreError};

/// Binds `$N` (and `?N`) to the N-th argument, as sqlx does; a bare `?`
/// takes the next one.
pub(super) fn bind(stmt: &mut rusqlite::Statement<'_>, args: &[Arg<'_>]) -> Result<()> {
    let mut next = 0;
    for index in 1..=stmt.parameter_count() {
        let number = match stmt.parameter_name(index) {
            Some(name) => name[1..]
                .parse::<usize>()
                .map_err(|_| StoreError::Corrupt(format!("parameter {name} is not numbered")))?,
            None => {
                next += 1;
                next
            }
        };
        let arg = number
            .checked_sub(1)
            .and_then(|i| args.get(i))
            .ok_or_else(|| StoreError::Corrupt(format!("no argument for parameter ${number}")))?;
        let bound = match arg {
            Arg::Int(v) => stmt.raw_bind_parameter(index, v),
            Arg::Text(v) => stmt.raw_bind_parameter(index, v.as_deref()),
            Arg::Bytes(v) => stmt.raw_bind_parameter(index, v.as_deref()),
            Arg::Bool(v) => stmt.raw_bind_parameter(index, v.map(i64::from)),
            Arg::Float(v) => stmt.raw_bind_parameter(index, v),
        };
        bound.map_err(StoreError::Sqlite)?;
    }
    Ok(())
}

/// A returned row, copied out of the statement (a rusqlite row borrows
/// its statement, which may not cross threads).
pub(super) struct OwnedRow {
    names: Arc<[String]>,
    values: Vec<SqlValue>,
}

impl OwnedRow {
    pub(super) fn read(row: &rusqlite::Row<'_>, names: &Arc<[String]>) -> Result<Self> {
        let values = (0..names.len())
            .map(|i| row.get::<_, SqlValue>(i))
            .collect::<Result<_, _>>()
            .map_err(StoreError::Sqlite)?;
        Ok(Self {
            names: names.clone(),
            values,
        })
    }

    fn value(&self, col: Col<'_>) -> Result<&SqlValue> {
        let index = match col {
            Col::At(i) => Some(i),
            Col::Name(name) => self.names.iter().position(|n| n == name),
        };
        index
            .and_then(|i| self.values.get(i))
            .ok_or_else(|| StoreError::Corrupt(format!("{col} is not in the row")))
    }
}

fn mismatch<T>(col: Col<'_>, want: &str, got: &SqlValue) -> Result<T> {
    Err(StoreError::Corrupt(format!(
        "{col} holds {:?}, not {want}",
        got.data_type()
    )))
}

impl Row for OwnedRow {
    fn int(&self, col: Col<'_>) -> Result<Option<i64>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Integer(i) => Ok(Some(*i)),
            other => mismatch(col, "an integer", other),
        }
    }

    fn text(&self, col: Col<'_>) -> Result<Option<String>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Text(t) => Ok(Some(t.clone())),
            other => mismatch(col, "text", other),
        }
    }

    fn bytes(&self, col: Col<'_>) -> Result<Option<Vec<u8>>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Blob(b) => Ok(Some(b.clone())),
            SqlValue::Text(t) => Ok(Some(t.clone().into_bytes())),
            other => mismatch(col, "bytes", other),
        }
    }

    fn boolean(&self, col: Col<'_>) -> Result<Option<bool>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Integer(i) => Ok(Some(*i != 0)),
            other => mismatch(col, "a boolean", other),
        }
    }

    fn float(&self, col: Col<'_>) -> Result<Option<f64>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Real(f) => Ok(Some(*f)),
            SqlValue::Integer(i) => Ok(Some(*i as f64)),
            other => mismatch(col, "a number", other),
        }
    }

    fn to_json(&self) -> Map<String, Value> {
        self.names
            .iter()
            .zip(&self.values)
            .map(|(name, value)| {
                let json = match value {
                    SqlValue::Null => Value::Null,
                    SqlValue::Integer(i) => Value::from(*i),
                    SqlValue::Real(f) => Value::from(*f),
                    SqlValue::Text(t) => Value::String(t.clone()),
                    SqlValue::Blob(b) => match String::from_utf8(b.clone()) {
                        Ok(text) => Value::String(text),
                        Err(e) => serde_json::json!({ "base64": STANDARD.encode(e.into_bytes()) }),
                    },
                };
                (name.clone(), json)
            })
            .collect()
    }
}
