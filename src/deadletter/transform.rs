//! `[[dead_letters.transforms]]`: named, versioned corrections of an
//! effect's body (RFC 6902 JSON Patch), declared in the config so that a
//! replay after a fix names a reviewed change instead of an ad-hoc edit
//! (DESIGN.md §7). A transform belongs to one operation (and, optionally,
//! one effect type): it is refused for any other.

use serde::Deserialize;
use serde_json::Value;

/// One declared transform.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    /// Its name (`fix-currency`); with `version`, what a replay names.
    pub name: String,
    /// Its version: a changed patch is a new version, so the audit log
    /// says exactly which change went out.
    pub version: u32,
    /// The operation whose effects it corrects.
    pub operation: String,
    /// Only effects of this type, when given.
    #[serde(default)]
    pub effect_type: Option<String>,
    /// What it corrects, for the operator choosing it.
    #[serde(default)]
    pub description: Option<String>,
    /// The RFC 6902 JSON Patch, as an array of operations
    /// (`{ op = "replace", path = "/currency", value = "EUR" }`).
    pub patch: Vec<Value>,
}

impl TransformConfig {
    /// `name@version`, as the audit log and the console write it.
    pub fn label(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// The patch, parsed.
    ///
    /// # Errors
    /// Why it is not an RFC 6902 JSON Patch.
    pub fn patch(&self) -> Result<json_patch::Patch, String> {
        serde_json::from_value(Value::Array(self.patch.clone()))
            .map_err(|e| format!("not an RFC 6902 JSON Patch: {e}"))
    }

    /// Checks the fields; `at` prefixes field names.
    ///
    /// # Errors
    /// `(field, message)` for the first bad field.
    pub fn validate(&self, at: &str) -> Result<(), (String, String)> {
        let field = |f: &str| format!("{at}.{f}");
        if !crate::approval::operation::is_config_name(&self.name) {
            return Err((
                field("name"),
                "must be 1-128 letters, digits, '_', '.' or '-'".into(),
            ));
        }
        if self.version == 0 {
            return Err((field("version"), "must be at least 1".into()));
        }
        if self.operation.is_empty() {
            return Err((field("operation"), "must name a declared operation".into()));
        }
        if self.patch.is_empty() {
            return Err((field("patch"), "must hold at least one operation".into()));
        }
        self.patch().map_err(|e| (field("patch"), e))?;
        Ok(())
    }
}

/// The transform `name` at `version` among `transforms`.
pub fn find<'a>(
    transforms: &'a [TransformConfig],
    name: &str,
    version: u32,
) -> Option<&'a TransformConfig> {
    transforms
        .iter()
        .find(|t| t.name == name && t.version == version)
}

/// Checks every transform and that no name and version is declared twice.
///
/// # Errors
/// `(field, message)` for the first bad one.
pub fn validate_all(transforms: &[TransformConfig]) -> Result<(), (String, String)> {
    for (i, t) in transforms.iter().enumerate() {
        let at = format!("dead_letters.transforms[{i}]");
        t.validate(&at)?;
        if transforms[..i]
            .iter()
            .any(|o| o.name == t.name && o.version == t.version)
        {
            return Err((
                format!("{at}.version"),
                format!("{} is declared twice", t.label()),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> TransformConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_patch_in_toml_parses_and_a_bad_one_names_its_field() {
        let good = parse(
            "name = \"fix-to\"\nversion = 2\noperation = \"send_email\"\n\
             patch = [{ op = \"replace\", path = \"/to\", value = \"b@example.com\" }]\n",
        );
        assert!(validate_all(std::slice::from_ref(&good)).is_ok());
        assert_eq!(good.label(), "fix-to@2");
        assert!(find(std::slice::from_ref(&good), "fix-to", 2).is_some());
        assert!(find(std::slice::from_ref(&good), "fix-to", 1).is_none());
        let bad = parse(
            "name = \"fix-to\"\nversion = 1\noperation = \"send_email\"\n\
             patch = [{ op = \"frobnicate\", path = \"/to\" }]\n",
        );
        let (field, message) = validate_all(&[bad]).unwrap_err();
        assert_eq!(field, "dead_letters.transforms[0].patch");
        assert!(message.contains("RFC 6902"), "{message}");
        let twice = validate_all(&[good.clone(), good]).unwrap_err();
        assert_eq!(twice.0, "dead_letters.transforms[1].version");
    }
}
