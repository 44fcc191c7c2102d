//! RFC 8785 (JSON Canonicalization Scheme) written straight into a buffer.
//!
//! Every claim and move hashes its audit entry over the entry's canonical
//! JSON, and every claim hashes its payload the same way. The
//! `serde_json_canonicalizer` crate gets there through a generic serializer
//! that re-parses each object key to sort it and boxes a writer for every
//! fragment; that made canonicalisation the largest single cost of a claim
//! after the database (BENCHMARKS.md, "Where the time goes now"). This
//! writer does the same work directly:
//!
//! - strings escaped as ECMAScript's `JSON.stringify` escapes them (`"`,
//!   `\`, the short forms `\b \f \n \r \t`, other controls as `\u00xx`
//!   with lower-case hex; nothing else), which is serde_json's escaping;
//! - object members sorted by their keys' UTF-16 code units;
//! - integers within ±2^53 in plain decimal, which is what ECMAScript's
//!   number-to-string gives for them; any other number is handed to
//!   `serde_json_canonicalizer`, so the output is the crate's byte for byte
//!   (the tests compare the two on generated values).

use std::io::Write as _;

use serde_json::{Number, Value};

/// The largest integer magnitude an IEEE 754 double holds exactly.
pub const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// A value that RFC 8785 cannot express (a number outside the double range,
/// possible only with arbitrary-precision numbers).
#[derive(Debug, thiserror::Error)]
#[error("cannot be canonicalised: {0}")]
pub struct NotCanonical(String);

/// The canonical form of `value`.
///
/// # Errors
/// [`NotCanonical`] for a number RFC 8785 cannot express.
pub fn to_vec(value: &Value) -> Result<Vec<u8>, NotCanonical> {
    let mut out = Vec::with_capacity(128);
    value_into(&mut out, value)?;
    Ok(out)
}

/// Appends the canonical form of `value` to `out`.
///
/// # Errors
/// [`NotCanonical`] for a number RFC 8785 cannot express (`out` then holds
/// a partial form).
pub fn value_into(out: &mut Vec<u8>, value: &Value) -> Result<(), NotCanonical> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => number_into(out, n)?,
        Value::String(s) => str_into(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value_into(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            // Usually already in order (serde_json's map sorts by bytes,
            // which differs from UTF-16 order only past U+FFFF), so this
            // is one comparison per member.
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push(b'{');
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                str_into(out, key);
                out.push(b':');
                value_into(out, item)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// Appends `s` as a JSON string, escaped as RFC 8785 requires.
pub fn str_into(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x0c => b'f',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x00..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short == 0 {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.push(b'\\');
            out.push(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends an integer as RFC 8785 writes it.
pub fn int_into(out: &mut Vec<u8>, n: i64) {
    // An i64 is always finite: it cannot fail.
    let _ = number_into(out, &Number::from(n));
}

fn number_into(out: &mut Vec<u8>, n: &Number) -> Result<(), NotCanonical> {
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_EXACT_INTEGER {
            // Writing into a Vec cannot fail.
            let _ = write!(out, "{i}");
            return Ok(());
        }
    }
    // Fractions, exponents and integers past 2^53: ECMAScript's
    // number-to-string, which the crate implements (ryu-js).
    let form = serde_json_canonicalizer::to_vec(n).map_err(|e| NotCanonical(e.to_string()))?;
    out.extend_from_slice(&form);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crate_form(value: &Value) -> Vec<u8> {
        serde_json_canonicalizer::to_vec(value).expect("the crate canonicalises it")
    }

    fn same(value: &Value) {
        let ours = to_vec(value).expect("ours canonicalises it");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&crate_form(value)),
            "{value}"
        );
    }

    #[test]
    // RFC 8785's own example spells this number with more digits than a
    // double holds; that is the point of it.
    #[allow(clippy::excessive_precision)]
    fn the_rfc_8785_examples_and_edges() {
        same(&json!({
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u{20ac}$\u{000F}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/",
            "literals": [null, true, false]
        }));
        same(&json!({
            "\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\u{1f600}": "Emoji: Grinning Face", "\u{0080}": "Control", "\u{00f6}": "Latin Small Letter O With Diaeresis"
        }));
        for n in [
            json!(0),
            json!(-0.0),
            json!(9007199254740992_i64),
            json!(9007199254740993_i64),
            json!(-9007199254740993_i64),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e21),
            json!(1e-7),
            json!(5e-324),
            json!(123.456),
        ] {
            same(&n);
        }
        same(&json!("\u{7f}\u{2028}\u{2029}\u{0}\u{1f}\u{8}\u{c}/é"));
        same(&json!({}));
        same(&json!([]));
        same(&json!([[], {}, [{}], {"a": []}]));
    }

    /// A small deterministic generator (no dependency): xorshift64*.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn string(&mut self) -> String {
            const PIECES: &[&str] = &[
                "a",
                "Z",
                "0",
                "_",
                " ",
                "\"",
                "\\",
                "/",
                "\n",
                "\t",
                "\u{1}",
                "\u{1f}",
                "\u{7f}",
                "é",
                "\u{20ac}",
                "\u{fb33}",
                "\u{ffff}",
                "\u{e000}",
                "\u{1f600}",
                "\u{10ffff}",
                "key",
                "kind",
            ];
            (0..self.below(6))
                .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
                .collect()
        }

        fn number(&mut self) -> Value {
            match self.below(6) {
                0 => json!(self.below(1000) as i64 - 500),
                1 => json!(self.next() as i64),
                2 => json!(self.next()),
                3 => json!((self.next() as i64 >> 10) as f64 / 7.0),
                4 => json!(f64::from_bits(self.next() & 0x7fef_ffff_ffff_ffff)),
                _ => json!(MAX_EXACT_INTEGER as i64 + self.below(3) as i64 - 1),
            }
        }

        fn value(&mut self, depth: u32) -> Value {
            match self.below(if depth == 0 { 4 } else { 6 }) {
                0 => Value::Null,
                1 => json!(self.below(2) == 0),
                2 => self.number(),
                3 => Value::String(self.string()),
                4 => (0..self.below(5)).map(|_| self.value(depth - 1)).collect(),
                _ => Value::Object(
                    (0..self.below(6))
                        .map(|_| (self.string(), self.value(depth - 1)))
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn matches_the_crate_on_generated_values() {
        let mut gen = Gen(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            same(&gen.value(3));
        }
    }

    #[test]
    fn integers_match_the_crate() {
        let mut gen = Gen(7);
        for n in (0..5_000)
            .map(|_| gen.next() as i64 >> gen.below(64))
            .chain([i64::MIN, i64::MAX, 0, -1, 1 << 53, -(1 << 53)])
        {
            let mut ours = Vec::new();
            int_into(&mut ours, n);
            assert_eq!(ours, crate_form(&json!(n)), "{n}");
        }
    }
}
