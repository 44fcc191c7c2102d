//! The AI step contract (DESIGN.md §6): an operation may register a JSON
//! Schema for its model output; posted outputs are validated against it
//! (types, enums, required fields, max lengths), every attempt is recorded
//! with the model's identity, and only validated output reaches a gate or
//! an effect.
//!
//! Schemas are compiled once at start ([`OutputSchemas::prepare`]), so a
//! broken schema stops the service instead of failing the first run.

pub mod port;

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::approval::OperationConfig;

/// Most violations listed for one output (the rest are counted).
const MAX_LISTED: usize = 50;

/// One reason an output does not satisfy its schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Violation {
    /// JSON pointer to the offending value (`""` is the whole output).
    pub path: String,
    /// What is wrong. Values are masked: model output is untrusted and may
    /// hold personal data.
    pub message: String,
}

/// An operation's compiled contract.
#[derive(Debug)]
pub struct Contract {
    validator: jsonschema::Validator,
    /// Invalid outputs allowed after the first.
    pub max_repairs: u32,
}

impl Contract {
    /// Every violation of `output` (empty when valid), at most
    /// [`MAX_LISTED`] of them plus a summary line.
    pub fn violations(&self, output: &Value) -> Vec<Violation> {
        let mut list = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(output) {
            if list.len() == MAX_LISTED {
                more += 1;
                continue;
            }
            list.push(Violation {
                path: error.instance_path().to_string(),
                message: error.masked().to_string(),
            });
        }
        if more > 0 {
            list.push(Violation {
                path: String::new(),
                message: format!("{more} more violations not listed"),
            });
        }
        list
    }
}

/// Every operation's compiled output schema.
#[derive(Debug, Default)]
pub struct OutputSchemas {
    by_operation: HashMap<String, Contract>,
}

impl OutputSchemas {
    /// Loads and compiles every `[operations.output]` schema.
    ///
    /// # Errors
    /// The field of the first schema that cannot be read or compiled.
    pub fn prepare(operations: &[OperationConfig]) -> Result<Self, String> {
        let mut by_operation = HashMap::new();
        for (i, op) in operations.iter().enumerate() {
            let Some(output) = &op.output else { continue };
            let at = format!("operations[{i}].output");
            let schema = match (&output.schema, &output.schema_file) {
                (Some(inline), _) => inline.clone(),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        format!("{at}.schema_file: cannot read {}: {e}", path.display())
                    })?;
                    serde_json::from_str(&text).map_err(|e| {
                        format!("{at}.schema_file: {} is not JSON: {e}", path.display())
                    })?
                }
                (None, None) => return Err(format!("{at}: no schema")),
            };
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| format!("{at}: not a valid JSON Schema: {e}"))?;
            by_operation.insert(
                op.name.clone(),
                Contract {
                    validator,
                    max_repairs: output.max_repairs,
                },
            );
        }
        Ok(Self { by_operation })
    }

    /// The contract of `operation`, if it registered one.
    pub fn contract(&self, operation: &str) -> Option<&Contract> {
        self.by_operation.get(operation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn contract(schema: Value) -> Contract {
        Contract {
            validator: jsonschema::validator_for(&schema).unwrap(),
            max_repairs: 2,
        }
    }

    #[test]
    fn lists_each_violation_with_its_path_and_masks_values() {
        let c = contract(json!({
            "type": "object",
            "required": ["reply", "category"],
            "properties": {
                "reply": {"type": "string", "maxLength": 10},
                "category": {"enum": ["refund", "faq"]},
                "amount": {"type": "number"}
            }
        }));
        assert!(c
            .violations(&json!({"reply": "ok", "category": "faq"}))
            .is_empty());
        let v = c.violations(&json!({"reply": "a secret value too long", "amount": "x"}));
        let paths: Vec<&str> = v.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"/reply"), "{v:?}");
        assert!(paths.contains(&"/amount"), "{v:?}");
        assert!(
            paths.contains(&""),
            "missing category is reported at the root: {v:?}"
        );
        assert!(
            v.iter().all(|v| !v.message.contains("a secret value")),
            "{v:?}"
        );
    }
}
