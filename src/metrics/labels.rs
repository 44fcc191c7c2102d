//! Bounded label values, so no caller can grow the metric series without limit.
//!
//! Every label a request can influence (namespace, event type, operation,
//! target) goes through a [`LabelBound`]. Values named in the configuration
//! always get their own series; beyond them, the first `max` distinct values
//! this process sees get theirs, and every later value is counted under
//! [`OTHER`]. A workflow token can claim in any namespace and a provider can
//! send any event type, so without the bound one misbehaving client could
//! create millions of series and take the Prometheus server down with it.
//!
//! Values are never keys, tokens or payload values: callers pass namespaces,
//! configured names and provider event types only (see [`super::Metrics`]).

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

/// The label value that stands for every value past the bound.
pub const OTHER: &str = "other";

/// One label family's admitted values.
#[derive(Debug)]
pub struct LabelBound {
    max_learned: usize,
    configured: HashSet<String>,
    learned: RwLock<HashSet<String>>,
}

impl LabelBound {
    /// A bound that always admits `configured` and learns up to `max_learned`
    /// more values.
    pub fn new(configured: impl IntoIterator<Item = String>, max_learned: usize) -> Self {
        Self {
            max_learned,
            configured: configured.into_iter().collect(),
            learned: RwLock::new(HashSet::new()),
        }
    }

    /// `value` when it is admitted (configured, already seen, or still
    /// within the bound), else [`OTHER`].
    pub fn label<'a>(&self, value: &'a str) -> &'a str {
        if self.admit(value) {
            value
        } else {
            OTHER
        }
    }

    /// Whether `value` has (or now gets) a series of its own.
    pub fn admit(&self, value: &str) -> bool {
        if value == OTHER || self.configured.contains(value) {
            return true;
        }
        {
            let learned = self.learned.read().unwrap_or_else(PoisonError::into_inner);
            if learned.contains(value) {
                return true;
            }
            if learned.len() >= self.max_learned {
                return false;
            }
        }
        let mut learned = self.learned.write().unwrap_or_else(PoisonError::into_inner);
        if learned.len() < self.max_learned {
            learned.insert(value.to_owned());
            return true;
        }
        learned.contains(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_values_always_pass_and_learned_ones_are_bounded() {
        let bound = LabelBound::new(["stripe".to_owned()], 2);
        assert_eq!(bound.label("a"), "a");
        assert_eq!(bound.label("b"), "b");
        assert_eq!(bound.label("c"), OTHER, "past the bound");
        assert_eq!(bound.label("a"), "a", "a learned value keeps its series");
        assert_eq!(bound.label("stripe"), "stripe", "configured never counts");
        assert_eq!(bound.label(OTHER), OTHER);
    }

    #[test]
    fn zero_learned_admits_only_configured() {
        let bound = LabelBound::new(["n8n".to_owned()], 0);
        assert_eq!(bound.label("n8n"), "n8n");
        assert_eq!(bound.label("x"), OTHER);
    }
}
