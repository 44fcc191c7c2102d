//! `[[operations]]`: every consequential effect belongs to a declared
//! operation with its gate policy (DESIGN.md §2, §5).

use serde::Deserialize;

use super::{ApprovalPolicy, ExceptionPolicy, OutputContract};

/// How an operation's effects are cleared to act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GatePolicy {
    /// A person approves before anything is sent.
    ApproveBeforeAct,
    /// Effects wait a window and can be cancelled until sent.
    ActWithWindow,
    /// Deterministic rules clear most runs; a sample still goes to a person.
    ApproveByException,
    /// Explicitly declared low-risk: no gate.
    None,
}

impl GatePolicy {
    /// The configured name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApproveBeforeAct => "approve_before_act",
            Self::ActWithWindow => "act_with_window",
            Self::ApproveByException => "approve_by_exception",
            Self::None => "none",
        }
    }
}

/// One declared operation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationConfig {
    /// The name effects refer to (`send_refund_email`).
    pub name: String,
    /// Its gate; defaults to `approve_before_act` when the operation is
    /// customer-visible or irreversible, and must be written out otherwise.
    #[serde(default)]
    pub gate: Option<GatePolicy>,
    /// Its effects reach customers.
    #[serde(default)]
    pub customer_visible: bool,
    /// Its effects cannot be undone.
    #[serde(default)]
    pub irreversible: bool,
    /// Downstream key template (`{namespace}`, `{key}`, `{effect_type}`);
    /// default `{namespace}:{key}:{effect_type}`.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// `act_with_window`: seconds effects wait (cancellable) before sending.
    #[serde(default)]
    pub window_secs: Option<u64>,
    /// Who may approve, how, and for how long (human gates).
    #[serde(default)]
    pub approval: ApprovalPolicy,
    /// `approve_by_exception`: eligibility rules and the human sample.
    #[serde(default)]
    pub exception: Option<ExceptionPolicy>,
    /// The JSON Schema model output must satisfy.
    #[serde(default)]
    pub output: Option<OutputContract>,
}

/// Whether `name` may name a declared thing (an operation, a dead-letter
/// transform): 1-128 letters, digits, `_`, `.` or `-`.
pub fn is_config_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

impl OperationConfig {
    /// The effective gate policy, if one can be decided.
    pub fn gate(&self) -> Option<GatePolicy> {
        self.gate
            .or((self.customer_visible || self.irreversible)
                .then_some(GatePolicy::ApproveBeforeAct))
    }

    /// The downstream idempotency key of one effect.
    pub fn key_for(&self, namespace: &str, key: &str, effect_type: &str) -> String {
        match &self.idempotency_key {
            Some(template) => template
                .replace("{namespace}", namespace)
                .replace("{key}", key)
                .replace("{effect_type}", effect_type),
            None => crate::outbox::default_idempotency_key(namespace, key, effect_type),
        }
    }

    /// Checks the fields; `at` prefixes field names.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self, at: &str) -> Result<(), (String, String)> {
        if !is_config_name(&self.name) {
            return Err((
                format!("{at}.name"),
                "must be 1-128 letters, digits, '_', '.' or '-'".into(),
            ));
        }
        if self.gate().is_none() {
            return Err((
                format!("{at}.gate"),
                "declare the gate (\"none\" for low-risk operations), or mark the operation customer_visible or irreversible".into(),
            ));
        }
        let gate = self.gate();
        if gate == Some(GatePolicy::ActWithWindow) && self.window_secs.is_none_or(|w| w == 0) {
            return Err((
                format!("{at}.window_secs"),
                "act_with_window needs a positive window (seconds effects wait, cancellable)"
                    .into(),
            ));
        }
        if gate == Some(GatePolicy::ApproveByException) && self.exception.is_none() {
            return Err((
                format!("{at}.exception"),
                "approve_by_exception needs [operations.exception] rules and a sample_rate".into(),
            ));
        }
        crate::approval::policy::validate(
            at,
            &self.approval,
            self.exception.as_ref(),
            self.output.as_ref(),
        )?;
        if let Some(template) = &self.idempotency_key {
            if !template.contains("{key}") {
                return Err((
                    format!("{at}.idempotency_key"),
                    "must contain {key}, or every run would share one key".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Loads and compiles every operation's `[operations.output]` schema.
///
/// # Errors
/// The field of the first schema that cannot be read or compiled.
pub fn output_schemas(
    operations: &[OperationConfig],
) -> Result<crate::validate::OutputSchemas, String> {
    let mut schemas = crate::validate::OutputSchemas::default();
    for (i, op) in operations.iter().enumerate() {
        let Some(output) = &op.output else { continue };
        let at = format!("operations[{i}].output");
        let schema = match (&output.schema, &output.schema_file) {
            (Some(inline), _) => inline.clone(),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!("{at}.schema_file: cannot read {}: {e}", path.display())
                })?;
                serde_json::from_str(&text)
                    .map_err(|e| format!("{at}.schema_file: {} is not JSON: {e}", path.display()))?
            }
            (None, None) => return Err(format!("{at}: no schema")),
        };
        schemas
            .insert(
                &op.name,
                &schema,
                output.max_repairs,
                output.keep_fields.clone(),
            )
            .map_err(|e| format!("{at}: {e}"))?;
    }
    Ok(schemas)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(text: &str) -> OperationConfig {
        toml::from_str(&format!("name = \"op\"\n{text}")).unwrap()
    }

    #[test]
    fn gate_defaults_to_approval_for_risky_operations_and_must_be_explicit_otherwise() {
        assert_eq!(
            op("customer_visible = true").gate(),
            Some(GatePolicy::ApproveBeforeAct)
        );
        assert_eq!(
            op("irreversible = true\ngate = \"act_with_window\"").gate(),
            Some(GatePolicy::ActWithWindow)
        );
        assert_eq!(op("gate = \"none\"").gate(), Some(GatePolicy::None));
        assert!(op("").validate("operations[0]").is_err());
    }

    #[test]
    fn key_template_fills_run_and_effect() {
        let o = op("gate = \"none\"\nidempotency_key = \"crm-{key}-{effect_type}\"");
        assert_eq!(o.key_for("crm", "c1", "upsert"), "crm-c1-upsert");
        assert_eq!(
            op("gate = \"none\"").key_for("crm", "c1", "upsert"),
            "crm:c1:upsert"
        );
        assert!(op("gate = \"none\"\nidempotency_key = \"fixed\"")
            .validate("o")
            .is_err());
    }
}
