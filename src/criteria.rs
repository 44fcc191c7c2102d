//! Search criteria as people and clients give them, shared by the lists
//! that page through time (the dead letters, the deliveries log): blank
//! text means no filter, a page size within bounds, an age (`90s`, `15m`,
//! `2h`, `7d`) or an RFC 3339 time, and the opaque keyset [`Cursor`] that
//! continues a page. Each list's own criteria type reads its fields
//! through these, so a criterion parses the same way, and fails with the
//! same [`FilterError`], wherever it is given.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::clock::Millis;

/// Page size when none is given.
pub const DEFAULT_LIMIT: i64 = 50;
/// The largest page.
pub const MAX_LIMIT: i64 = 500;

/// A criterion that does not parse; `field` names it as the API does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct FilterError {
    /// The parameter at fault (`limit`, `cursor`, `older_than`, …).
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl FilterError {
    /// The error for `field`.
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}

/// The text trimmed, or `None` when it is absent or blank (as an empty
/// form field sends it).
pub fn filled(text: Option<String>) -> Option<String> {
    text.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// The page size: [`DEFAULT_LIMIT`] when none is given.
///
/// # Errors
/// [`FilterError`] on `limit` outside 1–[`MAX_LIMIT`].
pub fn limit(given: Option<i64>) -> Result<i64, FilterError> {
    let limit = given.unwrap_or(DEFAULT_LIMIT);
    if (1..=MAX_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(FilterError::new(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ))
    }
}

/// Parses an age such as `90s`, `15m`, `2h` or `7d` into milliseconds.
///
/// # Errors
/// [`FilterError`] naming `field`.
pub fn parse_age(field: &'static str, text: &str) -> Result<Millis, FilterError> {
    crate::clock::parse_duration_ms(text)
        .ok_or_else(|| FilterError::new(field, "an age is a number and a unit: 90s, 15m, 2h or 7d"))
}

/// An RFC 3339 time, or an age counted back from `now`.
///
/// # Errors
/// [`FilterError`] naming `field` when the text is neither.
pub fn instant(field: &'static str, text: &str, now: Millis) -> Result<Millis, FilterError> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.timestamp_millis());
    }
    crate::clock::parse_duration_ms(text)
        .map(|age| now - age)
        .ok_or_else(|| FilterError::new(field, "a time is RFC 3339 or an age: 90s, 15m, 2h or 7d"))
}

/// Where a page ends: the last item's time (creation, arrival) and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The time the list is ordered by, of the last item shown.
    pub at: Millis,
    /// Its id (ties on `at` are ordered by id).
    pub id: String,
}

impl Cursor {
    /// The opaque form handed to clients.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.at, self.id))
    }

    /// Parses a cursor a client handed back.
    ///
    /// # Errors
    /// [`FilterError`] on `cursor` when it is not one this service made.
    pub fn decode(text: &str) -> Result<Self, FilterError> {
        let bad = || FilterError::new("cursor", "the cursor is not one this service returned");
        let raw = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let (at, id) = raw.split_once(':').ok_or_else(bad)?;
        let at = at.parse().map_err(|_| bad())?;
        if id.is_empty() || id.len() > 64 {
            return Err(bad());
        }
        Ok(Self {
            at,
            id: id.to_owned(),
        })
    }

    /// The encoded cursor past `page` when it is full (`limit` items: there
    /// may be more), read from its last item by `key`; `None` when the
    /// page is the last.
    pub fn after_full<T>(
        page: &[T],
        limit: i64,
        key: impl Fn(&T) -> (Millis, &str),
    ) -> Option<String> {
        let last = page.last().filter(|_| page.len() as i64 == limit)?;
        let (at, id) = key(last);
        Some(
            Self {
                at,
                id: id.to_owned(),
            }
            .encode(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_junk() {
        let c = Cursor {
            at: 1_700_000_000_000,
            id: "0190-abc".into(),
        };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        assert!(Cursor::decode("not base64!").is_err());
        assert!(Cursor::decode(&URL_SAFE_NO_PAD.encode("x:y")).is_err());
        assert!(Cursor::decode(&URL_SAFE_NO_PAD.encode("12:")).is_err());
        let page = [(1, "a"), (2, "b")];
        let next = Cursor::after_full(&page, 2, |&(at, id)| (at, id)).unwrap();
        assert_eq!(Cursor::decode(&next).unwrap().id, "b");
        assert_eq!(Cursor::after_full(&page, 3, |&(at, id)| (at, id)), None);
    }

    #[test]
    fn ages_parse_with_units_only() {
        assert_eq!(parse_age("a", "90s").unwrap(), 90_000);
        assert_eq!(parse_age("a", "2h").unwrap(), 7_200_000);
        assert_eq!(parse_age("a", "7d").unwrap(), 7 * 86_400_000);
        for bad in ["", "h", "10", "5w", "-1h", "1.5h"] {
            assert!(parse_age("a", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn blanks_are_absent_and_limits_bounded() {
        assert_eq!(filled(Some(" crm ".into())).as_deref(), Some("crm"));
        assert_eq!(filled(Some("  ".into())), None);
        assert_eq!(limit(None), Ok(DEFAULT_LIMIT));
        assert_eq!(limit(Some(0)).unwrap_err().field, "limit");
        assert_eq!(limit(Some(MAX_LIMIT + 1)).unwrap_err().field, "limit");
        assert_eq!(instant("since", "1970-01-01T00:00:05Z", 0), Ok(5_000));
        assert_eq!(instant("since", "1h", 3_600_000), Ok(0));
        assert_eq!(instant("since", "soon", 0).unwrap_err().field, "since");
    }
}
