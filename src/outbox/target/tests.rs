use super::*;

fn target(base: &str) -> TargetConfig {
    toml::from_str(&format!("name = \"t\"\nbase_url = \"{base}\"\n")).unwrap()
}

#[test]
fn allow_list_compares_origin_and_path_prefix() {
    let t = target("https://api.example.com/v1");
    assert!(t.allows("https://api.example.com/v1/messages"));
    assert!(t.allows("https://api.example.com/v1"));
    assert!(!t.allows("https://api.example.com/v10/messages"));
    assert!(!t.allows("https://api.example.com.evil.net/v1/messages"));
    assert!(!t.allows("http://api.example.com/v1/messages"));
    assert!(!t.allows("https://api.example.com:8443/v1/messages"));
    assert!(!t.allows("https://api.example.com@evil.example/v1/messages"));
    assert!(!t.allows("https://user:pw@api.example.com/v1/messages"));
    assert_eq!(
        t.resolve("https://api.example.com/v1/a/../b").unwrap(),
        "https://api.example.com/v1/b"
    );
    assert_eq!(
        t.join("/messages").unwrap(),
        "https://api.example.com/v1/messages"
    );
    assert!(t.join("/../admin").is_err());
}

#[test]
fn encoded_dot_segments_and_slashes_cannot_leave_the_prefix() {
    let t = target("https://api.example.com/v1");
    for url in [
        "https://api.example.com/v1/..%2fadmin",
        "https://api.example.com/v1/..%2Fadmin",
        "https://api.example.com/v1/%2e%2e/admin",
        "https://api.example.com/v1/%2E%2E%2Fadmin",
        "https://api.example.com/v1/.%2e/admin",
        "https://api.example.com/v1/a/..%2f..%2fadmin",
        "https://api.example.com/v1/..%5cadmin",
        "https://api.example.com/v1/%2e%2e",
    ] {
        assert!(!t.allows(url), "{url}");
    }
    assert!(t.join("/..%2fadmin").is_err());
    assert!(t.allows("https://api.example.com/v1/a%2Fb"));
    assert!(t.allows("https://api.example.com/v1/a/..%2fb"));
    assert!(t.allows("https://api.example.com/v1/100%25"));
}

#[test]
fn workflow_targets_honour_keys_by_default() {
    let mut t = target("http://127.0.0.1:5678");
    assert!(!t.honours_keys());
    t.kind = TargetKind::Workflow;
    assert!(t.honours_keys());
    t.honours_idempotency_keys = Some(false);
    assert!(!t.honours_keys());
}

#[test]
fn env_secret_headers_resolve_or_name_the_field() {
    let mut t: TargetConfig = toml::from_str(
        "name = \"t\"\nbase_url = \"https://x.example\"\n[secret_headers]\n\
         X-Token = \"env:ONCEGATE_TEST_TARGET_SECRET_SET\"\nX-Plain = \"literal\"\n",
    )
    .unwrap();
    let env = |var: &str| (var == "ONCEGATE_TEST_TARGET_SECRET_SET").then(|| "from-env".into());
    t.resolve_env_secrets("targets[0]", env).unwrap();
    assert_eq!(t.secret_headers["X-Token"].expose_secret(), "from-env");
    assert_eq!(t.secret_headers["X-Plain"].expose_secret(), "literal");

    let mut missing: TargetConfig = toml::from_str(
        "name = \"t\"\nbase_url = \"https://x.example\"\n[secret_headers]\n\
         X-Token = \"env:ONCEGATE_TEST_TARGET_SECRET_UNSET\"\n",
    )
    .unwrap();
    let (field, message) = missing.resolve_env_secrets("targets[0]", env).unwrap_err();
    assert_eq!(field, "targets[0].secret_headers.X-Token");
    assert!(
        message.contains("ONCEGATE_TEST_TARGET_SECRET_UNSET"),
        "{message}"
    );
}

#[test]
fn bad_secret_headers_are_refused() {
    let bad_name: TargetConfig = toml::from_str(
        "name = \"t\"\nbase_url = \"https://x.example\"\n[secret_headers]\n\"Bad Name\" = \"x\"\n",
    )
    .unwrap();
    assert_eq!(
        bad_name.validate("targets[0]").unwrap_err().0,
        "targets[0].secret_headers"
    );
    let bad_value: TargetConfig = toml::from_str(
        "name = \"t\"\nbase_url = \"https://x.example\"\n[secret_headers]\nX-Token = \"a\\nb\"\n",
    )
    .unwrap();
    assert_eq!(
        bad_value.validate("targets[0]").unwrap_err().0,
        "targets[0].secret_headers.X-Token"
    );
}

#[test]
fn secret_headers_never_show_in_debug() {
    let t: TargetConfig = toml::from_str(
        "name = \"t\"\nbase_url = \"https://x.example\"\n[secret_headers]\nAuthorization = \"Bearer s3cr3t\"\n",
    )
    .unwrap();
    assert!(!format!("{t:?}").contains("s3cr3t"));
}

#[test]
fn signing_secrets_resolve_from_the_environment_and_must_be_keys() {
    let mut t: TargetConfig = toml::from_str(
        "name = \"t\"\nbase_url = \"https://x.example\"\n\
         signing_secrets = [\"env:ONCEGATE_TEST_SIGNING\", \"whsec_c2Vjb25k\"]\n",
    )
    .unwrap();
    let env = |var: &str| (var == "ONCEGATE_TEST_SIGNING").then(|| "whsec_Zmlyc3Q=".into());
    t.resolve_env_secrets("targets[0]", env).unwrap();
    assert_eq!(t.signing_secrets[0].expose_secret(), "whsec_Zmlyc3Q=");
    assert_eq!(t.validate("targets[0]"), Ok(()));
    assert!(!format!("{t:?}").contains("Zmlyc3Q"), "never in Debug");

    let mut unset = t.clone();
    unset.signing_secrets[1] = SecretString::from("env:ONCEGATE_TEST_SIGNING_UNSET".to_owned());
    let (field, _) = unset.resolve_env_secrets("targets[0]", env).unwrap_err();
    assert_eq!(field, "targets[0].signing_secrets[1]");

    let mut bad = t.clone();
    bad.signing_secrets[1] = SecretString::from("whsec_not*base64".to_owned());
    let (field, message) = bad.validate("targets[0]").unwrap_err();
    assert_eq!(field, "targets[0].signing_secrets[1]");
    assert!(
        message.contains("not base64") && !message.contains("not*base64"),
        "{message}"
    );
}
