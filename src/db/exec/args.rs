//! Statement parameters: [`Arg`], [`Args`] and the [`Bind`] conversions.

use std::borrow::Cow;

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
