//! A token's namespace allow-list (`namespaces = ["crm", "billing:*"]`):
//! the runs a token may act on or read, by their namespace.
//!
//! A token without a list reaches every namespace (the behaviour before
//! lists existed); a token with one reaches only the namespaces it names,
//! exactly or by a prefix that ends in `*`. The list is a field of
//! [`super::Principal`], whatever made the principal (the config file or a
//! stored token), so every check reads it from one place.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ledger::Namespace;

/// One entry of an allow-list: a namespace (`crm`) or a prefix (`billing:*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamespacePattern {
    /// The namespace, or the prefix without its `*`.
    text: String,
    /// Whether `text` is a prefix.
    prefix: bool,
}

impl NamespacePattern {
    /// Parses an entry.
    ///
    /// # Errors
    /// A message when it is empty, holds anything but visible ASCII, is
    /// longer than a namespace, or has a `*` anywhere but at its end.
    pub fn parse(value: &str) -> Result<Self, String> {
        let (text, prefix) = match value.strip_suffix('*') {
            Some(text) => (text, true),
            None => (value, false),
        };
        if text.contains('*') {
            return Err(format!("{value:?}: `*` may only end a pattern"));
        }
        if !prefix {
            Namespace::parse(text).map_err(|e| format!("{value:?}: {e}"))?;
        } else if text.len() > Namespace::MAX_LEN || !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{value:?}: a prefix is at most {} bytes of visible ASCII",
                Namespace::MAX_LEN
            ));
        }
        Ok(Self {
            text: text.to_owned(),
            prefix,
        })
    }

    /// Whether `namespace` falls under this entry.
    pub fn matches(&self, namespace: &str) -> bool {
        if self.prefix {
            namespace.starts_with(&self.text)
        } else {
            namespace == self.text
        }
    }

    /// Whether every namespace `other` matches is matched by this entry too.
    pub fn covers(&self, other: &Self) -> bool {
        if self.prefix {
            other.text.starts_with(&self.text)
        } else {
            !other.prefix && other.text == self.text
        }
    }
}

impl fmt::Display for NamespacePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if self.prefix {
            f.write_str("*")?;
        }
        Ok(())
    }
}

impl Serialize for NamespacePattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NamespacePattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// The namespaces a principal reaches: all of them, or those of a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Namespaces {
    /// No list configured: every namespace.
    #[default]
    All,
    /// Only these.
    Only(Vec<NamespacePattern>),
}

impl Namespaces {
    /// From a configured list (`None`: every namespace).
    pub fn from_list(list: Option<&[NamespacePattern]>) -> Self {
        list.map_or(Self::All, |l| Self::Only(l.to_vec()))
    }

    /// Whether `namespace` is reached.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(list) => list.iter().any(|p| p.matches(namespace)),
        }
    }

    /// The list as configured, for messages (`None`: every namespace).
    pub fn describe(&self) -> Option<String> {
        match self {
            Self::All => None,
            Self::Only(list) => Some(
                list.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_and_prefixes_match_what_they_say() {
        let list: Vec<NamespacePattern> = ["crm", "billing:*"]
            .iter()
            .map(|p| NamespacePattern::parse(p).unwrap())
            .collect();
        let ns = Namespaces::from_list(Some(&list));
        assert!(ns.allows("crm") && ns.allows("billing:eu") && ns.allows("billing:"));
        assert!(!ns.allows("crm2") && !ns.allows("cr") && !ns.allows("billing"));
        assert!(Namespaces::All.allows("anything"));
        assert_eq!(ns.describe().as_deref(), Some("crm, billing:*"));
        for bad in ["", "a*b", "**", "with space", "é"] {
            assert!(NamespacePattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(NamespacePattern::parse("*").unwrap().matches("any"));
        let p = |s: &str| NamespacePattern::parse(s).unwrap();
        assert!(
            p("billing:*").covers(&p("billing:eu")) && p("billing:*").covers(&p("billing:eu*"))
        );
        assert!(p("crm").covers(&p("crm")) && p("*").covers(&p("x*")));
        assert!(!p("crm").covers(&p("crm*")) && !p("billing:*").covers(&p("billing*")));
        assert!(!p("crm").covers(&p("crm2")));
    }
}
