//! Any row as a JSON object, column by column, for the retention archive.
//!
//! The archive keeps every column of every table that belongs to a run,
//! including columns later migrations add, so it reads rows generically:
//! integers, reals, text and booleans as themselves, byte strings as text
//! when they are UTF-8 (otherwise `{"base64": …}`), NULL as null.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{Map, Value};
use sqlx::{Column, Row, TypeInfo, ValueRef};

/// Converts a row of this backend to a JSON object.
pub(crate) trait RowJson {
    /// Every column, by name.
    fn to_json(&self) -> Map<String, Value>;
}

fn bytes_value(bytes: Vec<u8>) -> Value {
    match String::from_utf8(bytes) {
        Ok(text) => Value::String(text),
        Err(e) => serde_json::json!({ "base64": STANDARD.encode(e.into_bytes()) }),
    }
}

impl RowJson for sqlx::sqlite::SqliteRow {
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

impl RowJson for sqlx::postgres::PgRow {
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
