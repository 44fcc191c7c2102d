//! The AI step contract (DESIGN.md §6): an operation may register a JSON
//! Schema for its model output; posted outputs are validated against it
//! (types, enums, required fields, max lengths), every attempt is recorded
//! with the model's identity, and only validated output reaches a gate or
//! an effect.
//!
//! Schemas are compiled once at start (`approval::operation::output_schemas`), so a
//! broken schema stops the service instead of failing the first run.
//!
//! Minimisation (§6): an operation may keep only listed fields of its
//! output (`keep_fields`, JSON pointers the schema declares). The rest is
//! dropped after validation and before the output is stored, so neither
//! `run_outputs`, nor the approval card, nor an exception rule ever sees
//! it; the redaction rules then apply to what is kept.

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
    /// The only fields kept (JSON pointers); empty keeps the whole output.
    keep: Vec<String>,
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

    /// `output` reduced to the kept fields (the whole of it when the
    /// operation lists none): each kept pointer's value at the same place,
    /// absent ones left out.
    pub fn minimise(&self, output: Value) -> Value {
        if self.keep.is_empty() {
            return output;
        }
        let mut kept = Value::Object(serde_json::Map::new());
        for pointer in &self.keep {
            if let Some(value) = output.pointer(pointer) {
                place(&mut kept, pointer, value.clone());
            }
        }
        kept
    }
}

/// Whether `keep` (a `keep_fields` list; empty keeps everything) keeps
/// the value at `pointer`: it lists the pointer or one of its parents.
pub fn keeps(keep: &[String], pointer: &str) -> bool {
    keep.is_empty()
        || keep
            .iter()
            .any(|k| pointer == k || pointer.starts_with(&format!("{k}/")))
}

/// Puts `value` at `pointer` inside `root`, creating objects on the way.
fn place(root: &mut Value, pointer: &str, value: Value) {
    let mut at = root;
    let mut tokens = pointer.split('/').skip(1).map(unescape).peekable();
    while let Some(token) = tokens.next() {
        let Value::Object(map) = at else { return };
        if tokens.peek().is_none() {
            map.insert(token, value);
            return;
        }
        at = map
            .entry(token)
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
}

/// A JSON pointer's reference token (RFC 6901: `~1` is `/`, `~0` is `~`).
fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Checks one `keep_fields` entry's form: a JSON pointer to a field.
///
/// # Errors
/// Why it is blank or not a pointer to a field.
pub fn check_keep_pointer(pointer: &str) -> Result<(), String> {
    if pointer.trim().is_empty() {
        return Err("a blank entry: name a field as a JSON pointer (\"/subject\")".into());
    }
    if !pointer.starts_with('/') || pointer.ends_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer to a field: write \"/subject\" or \"/a/b\""
        ));
    }
    Ok(())
}

/// Checks the form of every `keep_fields` entry (the schema aside).
///
/// # Errors
/// `(index, why)` of the first entry that is blank or not a pointer.
pub fn check_keep_form(keep: &[String]) -> Result<(), (usize, String)> {
    keep.iter()
        .enumerate()
        .try_for_each(|(i, p)| check_keep_pointer(p).map_err(|why| (i, why)))
}

/// Checks `keep` against `schema`: each entry a JSON pointer (`/a/b`) to
/// a property the schema declares (through nested `properties`), once.
///
/// # Errors
/// `(index, why)` of the first entry that is blank, not a pointer, not
/// declared by the schema, or listed twice.
pub fn check_keep_fields(schema: &Value, keep: &[String]) -> Result<(), (usize, String)> {
    for (i, pointer) in keep.iter().enumerate() {
        check_keep_pointer(pointer).map_err(|why| (i, why))?;
        let mut at = schema;
        for token in pointer.split('/').skip(1).map(unescape) {
            match at.get("properties").and_then(|p| p.get(&token)) {
                Some(next) => at = next,
                None => {
                    return Err((
                        i,
                        format!(
                            "{pointer:?}: the output schema declares no property {token:?} there"
                        ),
                    ))
                }
            }
        }
        if keep[..i].contains(pointer) {
            return Err((i, format!("{pointer:?} is listed twice")));
        }
    }
    Ok(())
}

/// Every operation's compiled output schema.
#[derive(Debug, Default)]
pub struct OutputSchemas {
    by_operation: HashMap<String, Contract>,
}

impl OutputSchemas {
    /// Compiles `schema` as `operation`'s contract, keeping only the
    /// fields `keep` lists (all when empty).
    ///
    /// # Errors
    /// Why `schema` is not a valid JSON Schema, or the first entry of
    /// `keep` it does not declare.
    pub fn insert(
        &mut self,
        operation: &str,
        schema: &Value,
        max_repairs: u32,
        keep: Vec<String>,
    ) -> Result<(), String> {
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("not a valid JSON Schema: {e}"))?;
        check_keep_fields(schema, &keep).map_err(|(i, why)| format!("keep_fields[{i}]: {why}"))?;
        self.by_operation.insert(
            operation.to_owned(),
            Contract {
                validator,
                max_repairs,
                keep,
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
            keep: Vec::new(),
        }
    }

    #[test]
    fn minimisation_keeps_only_the_listed_fields_in_place() {
        let schema = json!({ "type": "object", "properties": {
            "subject": {"type": "string"}, "body": {"type": "string"},
            "customer": {"type": "object", "properties": {"name": {}, "a/b": {}}},
            "notes": {"type": "string"} } });
        let keep: Vec<String> = ["/subject", "/customer/a~1b", "/body"]
            .map(String::from)
            .into();
        let c = Contract {
            keep: keep.clone(),
            ..contract(schema.clone())
        };
        let out = json!({ "subject": "Hi", "notes": "internal: Jane's phone 555",
            "customer": { "name": "Jane", "a/b": 1 } });
        assert_eq!(
            c.minimise(out.clone()),
            json!({ "subject": "Hi", "customer": { "a/b": 1 } }),
            "a listed field that is absent stays absent"
        );
        assert_eq!(contract(schema.clone()).minimise(out.clone()), out);
        assert_eq!(check_keep_fields(&schema, &keep), Ok(()));
        for (bad, why) in [
            ("", "blank"),
            ("  ", "blank"),
            ("subject", "not a JSON pointer"),
            ("/customer/", "not a JSON pointer"),
            ("/signature", "declares no property \"signature\""),
            ("/customer/phone", "declares no property \"phone\""),
            ("/subject", "listed twice"),
        ] {
            let list = vec!["/subject".to_owned(), bad.to_owned()];
            let (i, message) = check_keep_fields(&schema, &list).unwrap_err();
            assert_eq!(i, 1, "{bad:?}");
            assert!(message.contains(why), "{bad:?}: {message}");
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
