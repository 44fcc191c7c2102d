//! Which dead letters to list: the criteria as a person or a client gives
//! them (text), checked into the store's [`DeadLetterFilter`], and the
//! keyset [`Cursor`] that continues a page. The API's query string and the
//! console's filter form are both read straight into [`Criteria`] (so it
//! carries the query's OpenAPI parameters); the bulk replay's selection
//! filter builds one too (see [`super::plan`]).

use serde::Deserialize;
use utoipa::IntoParams;

use super::DeadLetterClass;
use crate::clock::Millis;
use crate::criteria::{filled, limit};
pub use crate::criteria::{parse_age, Cursor, FilterError, DEFAULT_LIMIT, MAX_LIMIT};
use crate::ledger::{InvalidId, Namespace, RunState};

impl From<InvalidId> for FilterError {
    fn from(err: InvalidId) -> Self {
        Self::new(err.field, err.to_string())
    }
}

/// The list's criteria as given, each optional text (`None`, or blank as
/// an empty form field sends it: no filter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Criteria {
    /// Only this class.
    pub class: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only runs now in this state.
    pub state: Option<String>,
    /// `false` (default): open only; `true`: resolved only; `any`: both.
    pub resolved: Option<String>,
    /// Only records at least this old (`90s`, `15m`, `2h`, `7d`).
    pub older_than: Option<String>,
    /// Only records at most this old.
    pub newer_than: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1–[`MAX_LIMIT`] (default [`DEFAULT_LIMIT`]).
    pub limit: Option<i64>,
}

impl Criteria {
    /// The store filter for these criteria at time `now`.
    ///
    /// # Errors
    /// [`FilterError`] naming the bad criterion.
    pub fn into_filter(self, now: Millis) -> Result<DeadLetterFilter, FilterError> {
        self.filled().checked(now)
    }

    /// These criteria with blank text taken as absent and the rest trimmed.
    fn filled(self) -> Self {
        Self {
            class: filled(self.class),
            namespace: filled(self.namespace),
            state: filled(self.state),
            resolved: filled(self.resolved),
            older_than: filled(self.older_than),
            newer_than: filled(self.newer_than),
            cursor: filled(self.cursor),
            limit: self.limit,
        }
    }

    /// The store filter once every blank text is taken out.
    fn checked(self, now: Millis) -> Result<DeadLetterFilter, FilterError> {
        let limit = limit(self.limit)?;
        let resolved = match self.resolved.as_deref() {
            None | Some("false") => Some(false),
            Some("true") => Some(true),
            Some("any") => None,
            Some(_) => return Err(FilterError::new("resolved", "must be true, false or any")),
        };
        let age = |field, text: Option<String>| {
            text.map(|a| parse_age(field, &a).map(|ms| now - ms))
                .transpose()
        };
        Ok(DeadLetterFilter {
            class: self
                .class
                .map(|c| c.parse())
                .transpose()
                .map_err(|e: String| FilterError::new("class", e))?,
            namespace: self
                .namespace
                .map(Namespace::parse)
                .transpose()?
                .map(|n| n.to_string()),
            state: self.state.map(|s| s.parse()).transpose().map_err(
                |e: crate::ledger::state::UnknownState| FilterError::new("state", e.to_string()),
            )?,
            resolved,
            created_before: age("older_than", self.older_than)?,
            created_after: age("newer_than", self.newer_than)?,
            after: self.cursor.map(|c| Cursor::decode(&c)).transpose()?,
            limit,
        })
    }
}

/// Which dead letters to list, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeadLetterFilter {
    /// Only this class.
    pub class: Option<DeadLetterClass>,
    /// Only this namespace (source or tenant).
    pub namespace: Option<String>,
    /// Only runs currently in this state.
    pub state: Option<RunState>,
    /// `Some(false)`: open only; `Some(true)`: resolved only; `None`: both.
    pub resolved: Option<bool>,
    /// Only records created at or before this time (an age filter).
    pub created_before: Option<Millis>,
    /// Only records created at or after this time.
    pub created_after: Option<Millis>,
    /// Continue after this record.
    pub after: Option<Cursor>,
    /// At most this many.
    pub limit: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criteria_check_each_parameter_and_take_blanks_as_absent() {
        let q = |f: fn(&mut Criteria)| {
            let mut q = Criteria::default();
            f(&mut q);
            q.into_filter(1_000_000)
        };
        let f = q(|_| {}).unwrap();
        assert_eq!((f.resolved, f.limit), (Some(false), DEFAULT_LIMIT));
        let field = |r: Result<DeadLetterFilter, FilterError>| r.unwrap_err().field;
        assert_eq!(field(q(|q| q.class = Some("x".into()))), "class");
        assert_eq!(field(q(|q| q.state = Some("x".into()))), "state");
        assert_eq!(field(q(|q| q.limit = Some(0))), "limit");
        assert_eq!(field(q(|q| q.cursor = Some("??".into()))), "cursor");
        assert_eq!(field(q(|q| q.resolved = Some("yes".into()))), "resolved");
        assert_eq!(
            q(|q| q.older_than = Some("1s".into()))
                .unwrap()
                .created_before,
            Some(999_000)
        );
        let blank = q(|q| {
            q.class = Some(" ".into());
            q.namespace = Some(String::new());
            q.older_than = Some(String::new());
        })
        .unwrap();
        assert_eq!(blank, q(|_| {}).unwrap());
        assert_eq!(
            q(|q| q.namespace = Some(" crm ".into()))
                .unwrap()
                .namespace
                .as_deref(),
            Some("crm")
        );
    }
}
