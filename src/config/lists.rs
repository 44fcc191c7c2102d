//! The `[[section]]` lists: each entry checks itself, and no two share a
//! name.

use std::collections::HashSet;

use super::ConfigError;
use crate::approval::OperationConfig;
use crate::ingress::SourceConfig;
use crate::outbox::TargetConfig;
use crate::proxy::ProxyConfig;

/// An entry of a `[[list]]` section, known by its name.
pub(super) trait Named {
    fn name(&self) -> &str;
}

impl Named for TargetConfig {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for SourceConfig {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for OperationConfig {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Checks each entry of the `[[section]]` list with its own `validate`,
/// and that no two share a name ("… is {verb} twice").
pub(super) fn validate_list<T: Named>(
    section: &str,
    list: &[T],
    verb: &str,
    validate: impl Fn(&T, &str) -> Result<(), (String, String)>,
) -> Result<(), ConfigError> {
    let mut seen = HashSet::new();
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{section}[{i}]");
        validate(entry, &at)?;
        if !seen.insert(entry.name()) {
            return Err(ConfigError::field(
                format!("{at}.name"),
                format!("{:?} is {verb} twice", entry.name()),
            ));
        }
    }
    Ok(())
}

impl Named for ProxyConfig {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Every operation `[dead_letters]` names (a transform's, a four-eyes
/// entry) is declared, or is the webhook forward.
pub(super) fn validate_dead_letter_operations(
    dead_letters: &crate::deadletter::DeadLetterConfig,
    operations: &[OperationConfig],
) -> Result<(), ConfigError> {
    let declared = |name: &str| {
        name == crate::ingress::FORWARD_OPERATION || operations.iter().any(|o| o.name == name)
    };
    for (i, t) in dead_letters.transforms.iter().enumerate() {
        if !declared(&t.operation) {
            return Err(ConfigError::field(
                format!("dead_letters.transforms[{i}].operation"),
                format!("no [[operations]] entry is named {:?}", t.operation),
            ));
        }
    }
    for (i, op) in dead_letters.four_eyes.iter().enumerate() {
        if !declared(op) {
            return Err(ConfigError::field(
                format!("dead_letters.four_eyes[{i}]"),
                format!("no [[operations]] entry is named {op:?}"),
            ));
        }
    }
    Ok(())
}
