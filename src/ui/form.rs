//! What the console's search forms and command forms share: a filter
//! field (a text box or a choice of names, "any" first), the query string
//! that carries a search to the next page, and the command form that asks
//! only for a reason (replay, release, forward anyway, redeliver).

use maud::{html, Markup};
use serde::Deserialize;

use super::error::UiError;
use super::session::Operator;
use super::{purpose, text_field};
use crate::criteria::filled;

/// The longest reason or note a command takes, in bytes.
pub const MAX_REASON: usize = 2_000;

/// A search's fields as a query string, blank ones left out (for the
/// pager's link, before its cursor).
pub fn filter_query(fields: &[(&str, &Option<String>)]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        if let Some(v) = filled((*value).clone()) {
            out.append_pair(name, &v);
        }
    }
    out.finish()
}

/// A labelled text box of a search form; `id` is the element's.
pub fn text_box(
    id: &str,
    name: &str,
    label: &str,
    value: &Option<String>,
    hint: Option<&str>,
) -> Markup {
    html! {
        div.field { label for=(id) { (label) }
            input id=(id) type="text" name=(name) value=(value.as_deref().unwrap_or_default()) placeholder=[hint]; }
    }
}

/// A labelled choice of `names` ("any" first, the blank value) of a
/// search form, the `value` given selected.
pub fn choice<'a>(
    id: &str,
    name: &str,
    label: &str,
    value: &Option<String>,
    names: impl IntoIterator<Item = &'a str>,
) -> Markup {
    html! {
        div.field { label for=(id) { (label) }
            select id=(id) name=(name) {
                option value="" { "any" }
                @for n in names {
                    option value=(n) selected[value.as_deref() == Some(n)] { (n) }
                }
            } }
    }
}

/// A command on a record's page, as a card: a form that posts `action`
/// to `{page}/{action}` with its CSRF token, whatever `extra` adds, and
/// one required text.
#[derive(Debug, Clone, Copy)]
pub struct Card<'a> {
    /// The record's page (`/ui/dead-letters/{id}`).
    pub page: &'a str,
    /// The record (the CSRF purpose's object).
    pub object: &'a str,
    /// The command (`replay`, `release`, `resolve`).
    pub action: &'a str,
    /// What the card's element ids start with (unique on the page).
    pub id: &'a str,
    /// The heading.
    pub title: &'a str,
    /// What the command does.
    pub note: &'a str,
    /// The required text's name (`reason`, `note`) and label.
    pub text: (&'a str, &'a str),
    /// The button's label.
    pub button: &'a str,
    /// Whether the command ends something for good (a red button).
    pub danger: bool,
}

impl Card<'_> {
    /// The card, with `extra` fields before the required text.
    pub fn render(&self, viewer: &Operator, extra: Markup) -> Markup {
        let (heading, text) = (
            format!("{}-h", self.id),
            format!("{}-{}", self.id, self.text.0),
        );
        html! {
            form.card.stack method="post" action={ (self.page) "/" (self.action) } aria-labelledby=(heading) {
                h2 id=(heading) { (self.title) }
                p.note { (self.note) }
                input type="hidden" name="csrf" value=(viewer.csrf(&purpose(self.action, self.object)));
                (extra)
                label for=(text) { (self.text.1) }
                textarea id=(text) name=(self.text.0) required maxlength=(MAX_REASON) {}
                button.good[!self.danger].danger[self.danger] type="submit" { (self.button) }
            }
        }
    }
}

/// A required, trimmed text of at most [`MAX_REASON`] bytes.
///
/// # Errors
/// [`UiError::Invalid`] when it is blank (saying `a {field} is required:
/// {hint}`) or too long.
pub fn required(field: &str, value: Option<String>, hint: &str) -> Result<String, UiError> {
    text_field(field, value, MAX_REASON)?
        .ok_or_else(|| UiError::Invalid(format!("a {field} is required: {hint}")))
}

/// A command form that carries only its CSRF token and a reason.
#[derive(Debug, Deserialize)]
pub struct ReasonForm {
    csrf: Option<String>,
    reason: Option<String>,
}

impl ReasonForm {
    /// The reason, once the form's token checks for `action` on `object`.
    ///
    /// # Errors
    /// A bad CSRF token, or no reason (the message ends with `hint`).
    pub fn reason(
        self,
        viewer: &Operator,
        action: &str,
        object: &str,
        hint: &str,
    ) -> Result<String, UiError> {
        viewer.check_csrf(&purpose(action, object), self.csrf.as_deref())?;
        required("reason", self.reason, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_queries_leave_blanks_out() {
        let (a, b, c) = (Some(" x y ".to_owned()), Some(" ".to_owned()), None);
        assert_eq!(filter_query(&[("a", &a), ("b", &b), ("c", &c)]), "a=x+y");
    }

    #[test]
    fn required_texts_name_what_is_missing() {
        let err = required("note", Some("  ".into()), "say why").unwrap_err();
        assert_eq!(
            err.to_string(),
            UiError::Invalid("a note is required: say why".into()).to_string()
        );
        assert_eq!(required("note", Some(" ok ".into()), "").unwrap(), "ok");
    }
}
