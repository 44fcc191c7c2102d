//! Loading, the environment overlay, and errors that name their field.

use super::*;
use std::io::Write;

fn load_text(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Config::load(Some(file.path()), env)
}

#[test]
fn defaults_need_no_file() {
    let config = Config::load(None, Vec::new()).unwrap();
    assert_eq!(config.database.url, "sqlite://oncegate.db");
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
}

#[test]
fn pool_and_group_commit_defaults_follow_the_backend() {
    let config = Config::load(None, Vec::new()).unwrap();
    assert_eq!(config.database.pool_size(), SQLITE_DEFAULT_POOL);
    let db = &config.database;
    assert_eq!(
        (db.group_commit_max_batch, db.group_commit_max_wait_us),
        (64, 0)
    );
    let pg = load_text("[database]\nurl = \"postgres://h/db\"\n", &[]).unwrap();
    assert_eq!(pg.database.pool_size(), POSTGRES_DEFAULT_POOL);
    let set = load_text(
        "[database]\nmax_connections = 5\ngroup_commit_max_batch = 8\n",
        &[("ONCEGATE_DATABASE_GROUP_COMMIT_MAX_WAIT_US", "250")],
    )
    .unwrap();
    assert_eq!(set.database.pool_size(), 5);
    let db = &set.database;
    assert_eq!(
        (db.group_commit_max_batch, db.group_commit_max_wait_us),
        (8, 250)
    );
    let one = |url: &str| {
        load_text(
            &format!("[database]\nurl = \"{url}\"\nmax_connections = 1\n"),
            &[],
        )
    };
    assert_eq!(one("sqlite://a.db").unwrap().database.pool_size(), 1);
    let err = one("postgres://h/db").unwrap_err().to_string();
    assert!(
        err.contains("database.max_connections") && err.contains("at least 2"),
        "{err}"
    );
}

#[test]
fn environment_overrides_file() {
    let config = load_text(
        "[database]\nurl = \"sqlite://a.db\"\n",
        &[
            ("ONCEGATE_DATABASE_URL", "sqlite://b.db"),
            ("ONCEGATE_LISTEN", "127.0.0.1:9"),
        ],
    )
    .unwrap();
    assert_eq!(config.database.url, "sqlite://b.db");
    assert_eq!(config.server.listen.port(), 9);
}

#[test]
fn errors_name_the_field() {
    let err = load_text("[server]\nlisten = \"nowhere\"\n", &[]).unwrap_err();
    assert!(err.to_string().starts_with("server.listen:"), "{err}");
    let err = load_text("[server]\nlisen = \"127.0.0.1:1\"\n", &[]).unwrap_err();
    assert!(err.to_string().contains("lisen"), "{err}");
    let err = load_text("[database]\nurl = \"mysql://x\"\n", &[]).unwrap_err();
    assert!(err.to_string().starts_with("database.url:"), "{err}");
    let err = load_text(
        "[[tokens]]\nsubject = \"n8n\"\ndigest = \"plain-token\"\nscopes = [\"workflow\"]\n",
        &[],
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("tokens[0].digest:"), "{err}");
    let err = load_text(
        &format!(
            "[[tokens]]\nsubject = \"x\"\ndigest = \"sha256:{}\"\nscopes = [\"root\"]\n",
            "a".repeat(64)
        ),
        &[],
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("tokens[0].scopes"), "{err}");
    let err = load_text("[ledger]\nmax_lease_ms = 10\n", &[]).unwrap_err();
    assert!(err.to_string().starts_with("ledger.max_lease_ms:"), "{err}");
    let err = load_text("[database]\ngroup_commit_max_batch = 0\n", &[]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("database.group_commit_max_batch:"),
        "{err}"
    );
    let err = load_text(
        "",
        &[("ONCEGATE_DATABASE_GROUP_COMMIT_MAX_WAIT_US", "1000000")],
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("database.group_commit_max_wait_us:"),
        "{err}"
    );
    let err = load_text("server = [\n", &[]).unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
}

#[test]
fn audit_retention_and_redaction_errors_name_the_field() {
    let config = load_text(
        "[audit]\ncheckpoint_interval_secs = 60\n[[redact]]\nnamespace = \"stripe\"\n\
         pointers = [\"/data/object/email\"]\n[retention]\narchive_dir = \"/tmp/a\"\n\
         [[retention.overrides]]\nnamespace = \"stripe\"\narchive_after_days = 7\n",
        &[("ONCEGATE_RETENTION_TOMBSTONE_DAYS", "120")],
    )
    .unwrap();
    assert_eq!(config.audit.checkpoint_interval_secs, 60);
    assert_eq!(config.retention.windows("stripe"), (7, 120));
    assert!(config.redactor().applies("stripe"));
    let err = load_text(
        "[[redact]]\nnamespace = \"x\"\npointers = [\"email\"]\n",
        &[],
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("redact[0].pointers[0]:"),
        "{err}"
    );
    let err = load_text("[retention]\ntombstone_days = 10\n", &[]).unwrap_err();
    assert!(
        err.to_string().starts_with("retention.tombstone_days:"),
        "{err}"
    );
}

#[test]
fn database_urls_lose_only_their_password() {
    use super::redact_url;
    assert_eq!(
        redact_url("postgres://u:secret@h:5432/db"),
        "postgres://u:***@h:5432/db"
    );
    assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(redact_url("sqlite://oncegate.db"), "sqlite://oncegate.db");
}

#[test]
fn connection_limits_are_checked() {
    for (text, field) in [
        (
            "header_read_timeout_ms = 0",
            "server.header_read_timeout_ms",
        ),
        ("body_read_timeout_ms = 0", "server.body_read_timeout_ms"),
        ("idle_timeout_ms = 0", "server.idle_timeout_ms"),
        ("max_connections = 0", "server.max_connections"),
        (
            "unauthenticated_body_budget_bytes = 1024",
            "server.unauthenticated_body_budget_bytes",
        ),
        (
            "metrics_token_digest = \"og_plain_token\"",
            "server.metrics_token_digest",
        ),
    ] {
        let err = load_text(&format!("[server]\n{text}\n"), &[]).unwrap_err();
        assert!(err.to_string().contains(field), "{text}: {err}");
    }
    let server = Config::load(None, Vec::new()).unwrap().server;
    assert_eq!(server.max_connections, 512);
    assert_eq!(server.unauthenticated_body_budget_bytes, 16 * 1024 * 1024);
}

#[test]
fn recovery_rules_load_per_namespace_and_bad_values_name_their_field() {
    let config = load_text(
        "[ledger]\nmax_reclaims = 3\n[[ledger.namespaces]]\nnamespace = \"stripe\"\n\
         stranded_after = \"10m\"\n[recovery]\ninterval_secs = 30\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.ledger.recovery("stripe").stranded_after_ms, 600_000);
    assert_eq!(config.ledger.recovery("other").max_reclaims, 3);
    assert_eq!(config.recovery.interval_secs, 30);
    for (text, field) in [
        ("[ledger]\nmax_reclaims = -2\n", "ledger.max_reclaims"),
        ("[ledger]\nretry_window = \"0h\"\n", "ledger.retry_window"),
        ("[recovery]\nbatch_size = 0\n", "recovery.batch_size"),
        (
            "[[ledger.namespaces]]\nnamespace = \"a b\"\n",
            "ledger.namespaces[0].namespace",
        ),
    ] {
        let err = load_text(text, &[]).unwrap_err().to_string();
        assert!(err.starts_with(field), "{text}: {err}");
    }
    let err = load_text("[ledger]\nstranded_after = \"soon\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a duration"), "{err}");
}

#[test]
fn an_upper_case_https_base_is_https() {
    let c = load_text(
        "[server]\npublic_base_url = \"HTTPS://Approvals.Example.com/\"\n",
        &[],
    )
    .unwrap();
    assert!(c.server.is_https(), "the cookie must stay Secure");
    assert_eq!(
        c.server.public_base().as_deref(),
        Some("https://approvals.example.com")
    );
    let local = load_text(
        "[server]\npublic_base_url = \"http://127.0.0.1:8080\"\n",
        &[],
    )
    .unwrap();
    assert!(!local.server.is_https());
    assert!(!load_text("", &[]).unwrap().server.is_https());
}

#[test]
fn output_keep_fields_must_name_fields_the_schema_declares() {
    let op = |keep: &str, rules: &str| {
        format!(
            "[[operations]]\nname = \"reply\"\ngate = \"approve_by_exception\"\n\
             [operations.output]\nkeep_fields = [{keep}]\n\
             [operations.output.schema]\ntype = \"object\"\n\
             [operations.output.schema.properties.subject]\ntype = \"string\"\n\
             [operations.output.schema.properties.amount]\ntype = \"number\"\n\
             [operations.exception]\nsample_rate = 0.1\n\
             [[operations.exception.rules]]\npointer = \"{rules}\"\nop = \"lte\"\nvalue = 5\n"
        )
    };
    let config = load_text(&op("\"/subject\", \"/amount\"", "/amount"), &[]).unwrap();
    let schemas = crate::approval::operation::output_schemas(&config.operations).unwrap();
    let kept = schemas
        .contract("reply")
        .unwrap()
        .minimise(serde_json::json!({ "subject": "s", "amount": 1, "note": "n" }));
    assert_eq!(kept, serde_json::json!({ "subject": "s", "amount": 1 }));

    for (keep, field) in [
        ("\"\"", "operations[0].output.keep_fields[0]:"),
        (
            "\"/subject\", \"amount\"",
            "operations[0].output.keep_fields[1]:",
        ),
    ] {
        let err = load_text(&op(keep, "/amount"), &[]).unwrap_err();
        assert!(err.to_string().starts_with(field), "{keep}: {err}");
    }
    let err = load_text(&op("\"/subject\"", "/amount"), &[]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("operations[0].exception.rules[0].pointer:")
            && err.to_string().contains("keep_fields drops"),
        "{err}"
    );
    let unknown = load_text(&op("\"/amount\", \"/signature\"", "/amount"), &[]).unwrap();
    let err = crate::approval::operation::output_schemas(&unknown.operations).unwrap_err();
    assert!(
        err.starts_with("operations[0].output: keep_fields[1]:")
            && err.contains("declares no property \"signature\""),
        "{err}"
    );
}

#[test]
fn an_oidc_section_is_checked_at_load_and_needs_a_public_base() {
    let section =
        "[approvals.oidc]\nissuer = \"https://id.example.com\"\nclient_id = \"oncegate\"\n";
    let ok = load_text(section, &[]).unwrap();
    assert_eq!(ok.approvals.oidc.unwrap().client_id, "oncegate");
    let away = format!("[server]\nlisten = \"0.0.0.0:8080\"\n\n{section}");
    let err = load_text(&away, &[]).unwrap_err().to_string();
    assert!(err.contains("server.public_base_url"), "{err}");
    let none = format!("{section}algorithms = [\"none\"]\n");
    let err = load_text(&none, &[]).unwrap_err().to_string();
    assert!(err.contains("approvals.oidc.algorithms"), "{err}");
    let typo = format!("{section}client_secrt = \"x\"\n");
    assert!(load_text(&typo, &[]).is_err(), "unknown fields are refused");
}
