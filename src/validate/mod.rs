//! The AI step contract (DESIGN.md §6): an operation may register a JSON
//! Schema for its model output; posted outputs are validated against it
//! (types, enums, required fields, max lengths), every attempt is recorded
//! with the model's identity, and only validated output reaches a gate or
//! an effect.
//!
//! Schemas are compiled once at start (`approval::operation::output_schemas`), so a
//! broken schema stops the service instead of failing the first run.

pub mod port;

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

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
    /// Compiles `schema` as `operation`'s contract.
    ///
    /// # Errors
    /// Why `schema` is not a valid JSON Schema.
    pub fn insert(
        &mut self,
        operation: &str,
        schema: &Value,
        max_repairs: u32,
    ) -> Result<(), String> {
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("not a valid JSON Schema: {e}"))?;
        self.by_operation.insert(
            operation.to_owned(),
            Contract {
                validator,
                max_repairs,
            },
        );
        Ok(())
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
