//! Per-operation gate settings (`[operations.approval]`,
//! `[operations.exception]`, `[operations.output]`) and the deterministic
//! eligibility rules of `approve_by_exception` (DESIGN.md §5).

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::server_key::ServerKey;

/// How an approver must have signed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApproverAuth {
    /// A session from an approver token, or from the trusted SSO header.
    #[default]
    TokenOrSso,
    /// Only the trusted SSO header: possessing a link or token is not enough.
    Sso,
}

impl ApproverAuth {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TokenOrSso => "token_or_sso",
            Self::Sso => "sso",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "token_or_sso" => Some(Self::TokenOrSso),
            "sso" => Some(Self::Sso),
            _ => None,
        }
    }
}

/// `[operations.approval]`: who may decide, how, and for how long.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// Intended approvers by subject. With `roles` empty too, any approver.
    pub subjects: Vec<String>,
    /// Intended approvers by role.
    pub roles: Vec<String>,
    /// Roles the approver must hold, all of them.
    pub required_roles: Vec<String>,
    /// `token_or_sso` (default) or `sso`.
    pub auth: ApproverAuth,
    /// Seconds a challenge stays open (default one day).
    pub expiry_secs: u64,
    /// Escalation group by subject: on expiry a new challenge goes to them
    /// instead of the run being dead-lettered.
    pub escalate_to_subjects: Vec<String>,
    /// Escalation group by role.
    pub escalate_to_roles: Vec<String>,
    /// Seconds the escalated challenge stays open (default: `expiry_secs`).
    pub escalation_expiry_secs: Option<u64>,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            subjects: Vec::new(),
            roles: Vec::new(),
            required_roles: Vec::new(),
            auth: ApproverAuth::TokenOrSso,
            expiry_secs: 86_400,
            escalate_to_subjects: Vec::new(),
            escalate_to_roles: Vec::new(),
            escalation_expiry_secs: None,
        }
    }
}

impl ApprovalPolicy {
    /// Whether expiry escalates instead of dead-lettering.
    pub fn escalates(&self) -> bool {
        !(self.escalate_to_subjects.is_empty() && self.escalate_to_roles.is_empty())
    }
}

/// A comparison of one validated output field with configured values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleOp {
    /// Equal to `value`.
    Eq,
    /// Not equal to `value`.
    Ne,
    /// Number below `value`.
    Lt,
    /// Number at most `value`.
    Lte,
    /// Number above `value`.
    Gt,
    /// Number at least `value`.
    Gte,
    /// One of `values` (an enum or allow-list).
    In,
    /// None of `values`.
    NotIn,
}

/// One eligibility rule: `pointer op value(s)` over the validated output.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EligibilityRule {
    /// A name for the audit log (default: the rule's text).
    #[serde(default)]
    pub name: Option<String>,
    /// JSON pointer into the output (`/amount`).
    pub pointer: String,
    /// The comparison.
    pub op: RuleOp,
    /// The operand of eq/ne/lt/lte/gt/gte.
    #[serde(default)]
    pub value: Option<Value>,
    /// The operands of in/not_in.
    #[serde(default)]
    pub values: Vec<Value>,
}

impl EligibilityRule {
    /// The rule's name in the audit log.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{} {:?}", self.pointer, self.op).to_lowercase())
    }

    /// Whether the output satisfies the rule. A missing field never does.
    pub fn holds(&self, output: &Value) -> bool {
        let Some(field) = output.pointer(&self.pointer) else {
            return false;
        };
        let number = |v: &Value| v.as_f64();
        let compare = |want: fn(f64, f64) -> bool| matches!((number(field), self.value.as_ref().and_then(number)), (Some(a), Some(b)) if want(a, b));
        match self.op {
            RuleOp::Eq => self.value.as_ref() == Some(field),
            RuleOp::Ne => self.value.as_ref().is_some_and(|v| v != field),
            RuleOp::Lt => compare(|a, b| a < b),
            RuleOp::Lte => compare(|a, b| a <= b),
            RuleOp::Gt => compare(|a, b| a > b),
            RuleOp::Gte => compare(|a, b| a >= b),
            RuleOp::In => self.values.contains(field),
            RuleOp::NotIn => !self.values.contains(field),
        }
    }

    fn validate(&self, at: &str) -> Result<(), (String, String)> {
        if !self.pointer.starts_with('/') {
            return Err((
                format!("{at}.pointer"),
                "must be a JSON pointer starting with '/'".into(),
            ));
        }
        let list = matches!(self.op, RuleOp::In | RuleOp::NotIn);
        let numeric = matches!(self.op, RuleOp::Lt | RuleOp::Lte | RuleOp::Gt | RuleOp::Gte);
        if list && (self.values.is_empty() || self.value.is_some()) {
            return Err((
                format!("{at}.values"),
                "in/not_in take a non-empty `values` list and no `value`".into(),
            ));
        }
        if !list && (self.value.is_none() || !self.values.is_empty()) {
            return Err((
                format!("{at}.value"),
                "this comparison takes one `value` and no `values`".into(),
            ));
        }
        if numeric && !self.value.as_ref().is_some_and(Value::is_number) {
            return Err((format!("{at}.value"), "must be a number".into()));
        }
        Ok(())
    }
}

/// `[operations.exception]`: when `approve_by_exception` may act alone.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExceptionPolicy {
    /// Every rule must hold for a run to be eligible.
    pub rules: Vec<EligibilityRule>,
    /// Share of eligible runs still sent to a person (0 to 1), chosen by a
    /// keyed hash of the run's identity ([`ServerKey`]), so a retried gate
    /// decides the same way and the workflow cannot predict it.
    pub sample_rate: f64,
}

/// What `approve_by_exception` decided, for the response and the audit log.
#[derive(Debug, Clone, PartialEq)]
pub enum Eligibility {
    /// Every rule held and the run was not sampled: act without a person.
    Auto,
    /// A rule failed: a person decides. Holds the rule's label.
    RuleFailed(String),
    /// Eligible, but picked for the human sample.
    Sampled,
}

impl ExceptionPolicy {
    /// Decides for one run's validated output; `sample` keys the human
    /// sample.
    pub fn decide(
        &self,
        output: &Value,
        namespace: &str,
        key: &str,
        sample: &ServerKey,
    ) -> Eligibility {
        if let Some(rule) = self.rules.iter().find(|r| !r.holds(output)) {
            return Eligibility::RuleFailed(rule.label());
        }
        if sample.point(namespace, key) < self.sample_rate {
            Eligibility::Sampled
        } else {
            Eligibility::Auto
        }
    }
}

/// `[operations.output]`: the JSON Schema model output must satisfy.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OutputContract {
    /// The schema inline (a TOML table)…
    #[serde(default)]
    pub schema: Option<Value>,
    /// …or a JSON file holding it.
    #[serde(default)]
    pub schema_file: Option<PathBuf>,
    /// Invalid outputs allowed after the first before the run fails for
    /// good (default 2).
    #[serde(default = "default_repairs")]
    pub max_repairs: u32,
    /// Fields holding the model's self-reported confidence: eligibility
    /// rules may not read them.
    #[serde(default)]
    pub confidence_fields: Vec<String>,
    /// Minimisation (DESIGN.md §6): the only output fields kept; empty keeps all.
    #[serde(default)]
    pub keep_fields: Vec<String>,
}

fn default_repairs() -> u32 {
    2
}

/// Checks an operation's gate settings together; `at` prefixes field names.
///
/// # Errors
/// `(field, message)` for the first bad field.
pub fn validate(
    at: &str,
    approval: &ApprovalPolicy,
    exception: Option<&ExceptionPolicy>,
    output: Option<&OutputContract>,
) -> Result<(), (String, String)> {
    if approval.expiry_secs == 0 || approval.escalation_expiry_secs == Some(0) {
        return Err((
            format!("{at}.approval.expiry_secs"),
            "must be positive".into(),
        ));
    }
    if let Some(out) = output {
        if out.schema.is_some() == out.schema_file.is_some() {
            return Err((
                format!("{at}.output"),
                "give exactly one of `schema` (inline) or `schema_file`".into(),
            ));
        }
        crate::validate::check_keep_form(&out.keep_fields)
            .map_err(|(i, why)| (format!("{at}.output.keep_fields[{i}]"), why))?;
    }
    let Some(exception) = exception else {
        return Ok(());
    };
    if !(0.0..=1.0).contains(&exception.sample_rate) {
        return Err((
            format!("{at}.exception.sample_rate"),
            "must be between 0 and 1".into(),
        ));
    }
    let Some(out) = output else {
        return Err((
            format!("{at}.output"),
            "approve_by_exception rules read validated output: declare the output schema".into(),
        ));
    };
    if exception.rules.is_empty() {
        return Err((
            format!("{at}.exception.rules"),
            "declare at least one eligibility rule".into(),
        ));
    }
    let confidence: BTreeSet<&str> = out.confidence_fields.iter().map(String::as_str).collect();
    for (i, rule) in exception.rules.iter().enumerate() {
        let rat = format!("{at}.exception.rules[{i}]");
        rule.validate(&rat)?;
        if !crate::validate::keeps(&out.keep_fields, &rule.pointer) {
            let why = "reads a field output.keep_fields drops: keep it, or the rule never holds";
            return Err((format!("{rat}.pointer"), why.into()));
        }
        let reads_confidence = confidence.iter().any(|c| {
            rule.pointer == *c
                || rule.pointer.starts_with(&format!("{c}/"))
                || c.starts_with(&format!("{}/", rule.pointer))
        });
        if reads_confidence {
            return Err((
                format!("{rat}.pointer"),
                "reads the model's self-reported confidence, which is never an eligibility input"
                    .into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(text: &str) -> EligibilityRule {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn rules_compare_numbers_values_and_lists() {
        let out = json!({"amount": 40, "category": "refund", "flag": true});
        assert!(rule("pointer = \"/amount\"\nop = \"lte\"\nvalue = 50").holds(&out));
        assert!(!rule("pointer = \"/amount\"\nop = \"gt\"\nvalue = 50").holds(&out));
        assert!(
            rule("pointer = \"/category\"\nop = \"in\"\nvalues = [\"refund\", \"faq\"]")
                .holds(&out)
        );
        assert!(
            !rule("pointer = \"/category\"\nop = \"not_in\"\nvalues = [\"refund\"]").holds(&out)
        );
        assert!(rule("pointer = \"/flag\"\nop = \"eq\"\nvalue = true").holds(&out));
        assert!(!rule("pointer = \"/missing\"\nop = \"ne\"\nvalue = 1").holds(&out));
        assert!(!rule("pointer = \"/category\"\nop = \"lt\"\nvalue = 5").holds(&out));
    }

    #[test]
    fn rules_may_not_read_confidence() {
        let exception = ExceptionPolicy {
            rules: vec![rule(
                "pointer = \"/scores/confidence\"\nop = \"gte\"\nvalue = 0.9",
            )],
            sample_rate: 0.1,
        };
        let output = OutputContract {
            schema: Some(json!({})),
            schema_file: None,
            max_repairs: 2,
            confidence_fields: vec!["/scores".into()],
            keep_fields: vec![],
        };
        let err = validate(
            "op",
            &ApprovalPolicy::default(),
            Some(&exception),
            Some(&output),
        )
        .unwrap_err();
        assert_eq!(err.0, "op.exception.rules[0].pointer");
        let no_schema = validate("op", &ApprovalPolicy::default(), Some(&exception), None);
        assert_eq!(no_schema.unwrap_err().0, "op.output");
    }

    #[test]
    fn sampling_is_deterministic_and_uniform_enough() {
        let policy = ExceptionPolicy {
            rules: vec![rule("pointer = \"/a\"\nop = \"eq\"\nvalue = 1")],
            sample_rate: 0.25,
        };
        let out = json!({"a": 1});
        let key = ServerKey::new(b"test secret");
        let sampled = (0..4000)
            .filter(|i| policy.decide(&out, "ns", &format!("k{i}"), &key) == Eligibility::Sampled)
            .count();
        assert!((850..1150).contains(&sampled), "{sampled}");
        assert_eq!(
            policy.decide(&out, "ns", "k1", &key),
            policy.decide(&out, "ns", "k1", &key)
        );
        assert_eq!(
            policy.decide(&json!({"a": 2}), "ns", "k1", &key),
            Eligibility::RuleFailed("/a eq".into())
        );
    }
}
