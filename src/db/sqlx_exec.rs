//! The leaf: [`Exec`], [`Read`] and [`Row`] for sqlx's SQLite and
//! PostgreSQL connections. The only place that binds parameters or reads
//! columns through sqlx; the small macro here spells the identical column
//! getters once for both row types.

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use serde_json::{Map, Value};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Arguments, Column, PgConnection, PgPool, SqliteConnection, SqlitePool, TypeInfo};
use sqlx::{Row as _, ValueRef};

use super::exec::{Arg, Args, Col, Each, Exec, Read, Row};
use crate::ledger::storage::{Result, StoreError};

fn bind_error(err: sqlx::error::BoxDynError) -> StoreError {
    StoreError::Database(sqlx::Error::Encode(err))
}

/// Adds one of our values to a sqlx argument list, borrowing what it can.
macro_rules! add_arg {
    ($out:ident, $arg:expr) => {
        match $arg {
            Arg::Int(v) => $out.add(v),
            Arg::Text(Some(Cow::Borrowed(t))) => $out.add(t),
            Arg::Text(Some(Cow::Owned(t))) => $out.add(t),
            Arg::Text(None) => $out.add(None::<String>),
            Arg::Bytes(Some(Cow::Borrowed(b))) => $out.add(b),
            Arg::Bytes(Some(Cow::Owned(b))) => $out.add(b),
            Arg::Bytes(None) => $out.add(None::<Vec<u8>>),
            Arg::Bool(v) => $out.add(v),
            Arg::Float(v) => $out.add(v),
        }
        .map_err(bind_error)?
    };
}

fn sqlite_args(args: Args<'_>) -> Result<SqliteArguments<'_>> {
    let mut out = SqliteArguments::default();
    for arg in args.into_inner() {
        add_arg!(out, arg);
    }
    Ok(out)
}

fn pg_args(args: Args<'_>) -> Result<PgArguments> {
    let mut out = PgArguments::default();
    for arg in args.into_inner() {
        add_arg!(out, arg);
    }
    Ok(out)
}

/// Reads a column of a sqlx row as `$ty`.
macro_rules! column_getters {
    ($($method:ident => $ty:ty),* $(,)?) => {$(
        fn $method(&self, col: Col<'_>) -> Result<Option<$ty>> {
            Ok(match col {
                Col::Name(name) => self.try_get::<Option<$ty>, _>(name)?,
                Col::At(i) => self.try_get::<Option<$ty>, _>(i)?,
            })
        }
    )*};
}

fn bytes_value(bytes: Vec<u8>) -> Value {
    match String::from_utf8(bytes) {
        Ok(text) => Value::String(text),
        Err(e) => serde_json::json!({ "base64": STANDARD.encode(e.into_bytes()) }),
    }
}

impl Row for SqliteRow {
    column_getters!(int => i64, text => String, bytes => Vec<u8>, boolean => bool, float => f64);

    fn to_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        for (i, column) in self.columns().iter().enumerate() {
            let value = match self.try_get_raw(i) {
                Ok(raw) if raw.is_null() => Value::Null,
                Ok(raw) => match raw.type_info().name() {
                    "INTEGER" | "INT" | "BIGINT" | "BOOLEAN" => {
                        self.try_get::<i64, _>(i).map_or(Value::Null, Value::from)
                    }
                    "REAL" => self.try_get::<f64, _>(i).map_or(Value::Null, Value::from),
                    "BLOB" => self
                        .try_get::<Vec<u8>, _>(i)
                        .map_or(Value::Null, bytes_value),
                    _ => self
                        .try_get::<String, _>(i)
                        .map_or(Value::Null, Value::String),
                },
                Err(_) => Value::Null,
            };
            map.insert(column.name().to_owned(), value);
        }
        map
    }
}

impl Row for PgRow {
    column_getters!(int => i64, text => String, bytes => Vec<u8>, boolean => bool, float => f64);

    fn to_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        for (i, column) in self.columns().iter().enumerate() {
            let null = self.try_get_raw(i).map_or(true, |raw| raw.is_null());
            let value = if null {
                Value::Null
            } else {
                match column.type_info().name() {
                    "INT8" => self.try_get::<i64, _>(i).map_or(Value::Null, Value::from),
                    "INT4" => self.try_get::<i32, _>(i).map_or(Value::Null, Value::from),
                    "INT2" => self.try_get::<i16, _>(i).map_or(Value::Null, Value::from),
                    "FLOAT8" => self.try_get::<f64, _>(i).map_or(Value::Null, Value::from),
                    "BOOL" => self.try_get::<bool, _>(i).map_or(Value::Null, Value::from),
                    "BYTEA" => self
                        .try_get::<Vec<u8>, _>(i)
                        .map_or(Value::Null, bytes_value),
                    name => self.try_get::<String, _>(i).map_or_else(
                        |_| Value::String(format!("<column type {name} is not archived>")),
                        Value::String,
                    ),
                }
            };
            map.insert(column.name().to_owned(), value);
        }
        map
    }
}

/// `Exec` for a sqlx connection type.
macro_rules! sqlx_exec {
    ($conn:ty, $bind:ident) => {
        impl Exec for $conn {
            fn execute<'e>(
                &'e mut self,
                sql: &'e str,
                args: Args<'e>,
            ) -> BoxFuture<'e, Result<u64>> {
                Box::pin(async move {
                    let args = $bind(args)?;
                    let done = sqlx::query_with(sql, args).execute(&mut *self).await?;
                    Ok(done.rows_affected())
                })
            }

            fn fetch<'e>(
                &'e mut self,
                sql: &'e str,
                args: Args<'e>,
                each: Each<'e>,
            ) -> BoxFuture<'e, Result<()>> {
                Box::pin(async move {
                    let args = $bind(args)?;
                    let mut rows = sqlx::query_with(sql, args).fetch(&mut *self);
                    while let Some(row) = rows.try_next().await? {
                        each(&row)?;
                    }
                    Ok(())
                })
            }
        }
    };
}

sqlx_exec!(SqliteConnection, sqlite_args);
sqlx_exec!(PgConnection, pg_args);

/// SQLite's read pool: its connections run with `PRAGMA query_only = ON`,
/// and the type offers no write.
#[derive(Debug, Clone)]
pub struct SqliteReadPool(pub(crate) SqlitePool);

impl Read for SqliteReadPool {
    fn stream<'e>(
        &'e self,
        sql: &'e str,
        args: Args<'e>,
    ) -> BoxStream<'e, Result<Box<dyn Row + 'static>>> {
        match sqlite_args(args) {
            Ok(args) => sqlx::query_with(sql, args)
                .fetch(&self.0)
                .map_ok(|row| Box::new(row) as Box<dyn Row>)
                .map_err(StoreError::from)
                .boxed(),
            Err(err) => futures_util::stream::once(async move { Err(err) }).boxed(),
        }
    }
}

impl Read for PgPool {
    fn stream<'e>(
        &'e self,
        sql: &'e str,
        args: Args<'e>,
    ) -> BoxStream<'e, Result<Box<dyn Row + 'static>>> {
        match pg_args(args) {
            Ok(args) => sqlx::query_with(sql, args)
                .fetch(self)
                .map_ok(|row| Box::new(row) as Box<dyn Row>)
                .map_err(StoreError::from)
                .boxed(),
            Err(err) => futures_util::stream::once(async move { Err(err) }).boxed(),
        }
    }
}
