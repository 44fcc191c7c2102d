//! The metrics a real `oncegate serve` exports: every series the shipped
//! alerts, docs/metrics.md and the README name is scraped from the binary
//! after traffic that moves it, and every exported family is documented.

use std::collections::BTreeSet;
use std::time::Duration;

use oncegate::config::Scope;
use serde_json::{json, Value};

use crate::harness::{answer, eventually, scrape, token};
use crate::ingress::{stripe_event, stripe_signature, SECRET};
use crate::process::{write_config_with, Server};
use crate::target::{Behaviour, MockTarget};

/// Every `oncegate_<name>` word of `text`.
fn metric_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.len() > "oncegate_".len() && w.starts_with("oncegate_"))
        .map(str::to_owned)
        .collect()
}

/// The families of a Prometheus text scrape (`# TYPE <name> <type>`).
fn families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// The value of the first sample whose line starts with `series`.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

struct Peer {
    client: reqwest::Client,
    base: String,
}

impl Peer {
    async fn post(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let req = self.client.post(format!("{}{path}", self.base));
        answer(req.bearer_auth(token).json(body)).await
    }

    async fn claim(&self, token: &str, ns: &str, key: &str, payload: i64, lease_ms: i64) -> Value {
        let body = json!({ "namespace": ns, "key": key, "payload": { "n": payload }, "lease_ms": lease_ms });
        self.post("/v1/claims", token, &body).await.1
    }

    async fn scrape(&self) -> String {
        scrape(&self.client, &self.base).await
    }

    /// Scrapes until `series` has a value of at least `min`.
    async fn scrape_until(&self, series: &str, min: f64) -> String {
        eventually(series, Duration::from_secs(30), || async {
            let text = self.scrape().await;
            (value(&text, series).is_some_and(|v| v >= min)).then_some(text)
        })
        .await
    }
}

#[tokio::test]
async fn every_alerted_and_documented_series_comes_from_the_real_server() {
    let workflow = MockTarget::start().await;
    // The workflow refuses the forward: a permanent failure, a dead letter.
    workflow.set_default(Behaviour::status(400));
    let mail = MockTarget::start().await;
    let db = crate::harness::TestDb::new(crate::harness::Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (admin, admin_entry) = token("ops", &[Scope::Admin]);
    let extra = format!(
        "[metrics]\nnamespaces = [\"crm\"]\n\n\
         [[tokens]]\nsubject = \"ops\"\ndigest = \"{digest}\"\nscopes = [\"admin\"]\n\n\
         [[targets]]\nname = \"n8n\"\nbase_url = \"{wf}/webhook\"\nkind = \"workflow\"\n\n\
         [[targets]]\nname = \"mail\"\nbase_url = \"{mail}\"\n\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{SECRET}\"]\ntarget = \"n8n\"\n\n\
         [[operations]]\nname = \"send_email\"\ngate = \"none\"\n\n\
         [[operations]]\nname = \"send_reply\"\ncustomer_visible = true\n[operations.approval]\nexpiry_secs = 1\n\n\
         [[operations]]\nname = \"refund\"\ngate = \"none\"\n\
         [operations.output]\nmax_repairs = 1\n[operations.output.schema]\ntype = \"object\"\nrequired = [\"amount\"]\n",
        digest = admin_entry.digest,
        wf = workflow.base_url(),
        mail = mail.base_url(),
    );
    let (config, workflow_token) = write_config_with(dir.path(), &db.url, &extra);
    let server = Server::start(&config, dir.path(), &[]);
    let peer = Peer {
        client: reqwest::Client::new(),
        base: server.base.clone(),
    };
    let wf = workflow_token.as_str();

    // Ledger: a claim, a conflict, a lease steal, a completion, a stranded run.
    let first = peer.claim(wf, "crm", "order:1", 1, 100).await;
    assert_eq!(first["claimed"], true, "{first}");
    let other_payload = json!({ "namespace": "crm", "key": "order:1", "payload": { "n": 2 } });
    assert_eq!(peer.post("/v1/claims", wf, &other_payload).await.0, 422);
    let stolen = eventually(
        "the short lease expires",
        Duration::from_secs(10),
        || async {
            let again = peer.claim(wf, "crm", "order:1", 1, 60_000).await;
            (again["claimed"] == true).then_some(again)
        },
    )
    .await;
    let done =
        json!({ "namespace": "crm", "key": "order:1", "lease": stolen["lease"], "result": {} });
    assert_eq!(peer.post("/v1/runs/complete", wf, &done).await.0, 200);
    let stale = peer.claim(wf, "crm", "order:2", 2, 100).await;
    assert_eq!(stale["claimed"], true, "{stale}");

    // Ingress: a refused signature, and a verified event the workflow refuses.
    let body = stripe_event("evt_1", "charge.succeeded", "ch_1");
    let t = chrono::Utc::now().timestamp();
    for sig in [
        stripe_signature("whsec_wrong", t, &body),
        stripe_signature(SECRET, t, &body),
    ] {
        let resp = peer
            .client
            .post(format!("{}/hooks/stripe", peer.base))
            .header("stripe-signature", sig)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert!(
            matches!(resp.status().as_u16(), 200 | 401),
            "{}",
            resp.status()
        );
    }
    peer.scrape_until("oncegate_dead_letters_open{namespace=\"stripe\"}", 1.0)
        .await;

    // Approval and model output: an invalid output, a gate nobody decides.
    let refund = peer.claim(wf, "support", "ticket:1", 1, 60_000).await;
    let output = json!({ "namespace": "support", "key": "ticket:1", "lease": refund["lease"],
        "operation": "refund", "output": { "reply": "no amount" },
        "model": { "provider_class": "hosted", "model": "drafter", "revision": "r1" } });
    let (status, answer) = peer.post("/v1/runs/output", wf, &output).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["repairs_left"], 1, "{answer}");
    // The repair is invalid too: the run fails for good (the alert's series).
    let (status, answer) = peer.post("/v1/runs/output", wf, &output).await;
    assert_eq!(
        (status, answer["repairs_left"].as_i64()),
        (422, Some(0)),
        "{answer}"
    );
    // A valid output: the failure rate's denominator.
    let valid = peer.claim(wf, "support", "ticket:3", 3, 60_000).await;
    let output = json!({ "namespace": "support", "key": "ticket:3", "lease": valid["lease"],
        "operation": "refund", "output": { "amount": 5 },
        "model": { "provider_class": "hosted", "model": "drafter", "revision": "r1" } });
    let (status, answer) = peer.post("/v1/runs/output", wf, &output).await;
    assert_eq!(status, 200, "{answer}");
    let gated = peer.claim(wf, "support", "ticket:2", 2, 60_000).await;
    let effect = |operation: &str| {
        json!([{ "operation": operation, "effect_type": "reply", "target": "mail",
            "path": "/send", "body": { "text": "hello" } }])
    };
    let gate = json!({ "namespace": "support", "key": "ticket:2", "lease": gated["lease"],
        "effects": effect("send_reply"), "summary": "a reply" });
    let (status, answer) = peer.post("/v1/runs/gate", wf, &gate).await;
    assert_eq!(status, 200, "{answer}");

    // The kill switch holds an ungated effect.
    let off = json!({ "target": "mail", "enabled": false });
    assert_eq!(peer.post("/v1/admin/actions", &admin, &off).await.0, 200);
    let held = peer.claim(wf, "crm", "mail:1", 3, 60_000).await;
    let commit = json!({ "namespace": "crm", "key": "mail:1", "lease": held["lease"],
        "effects": effect("send_email") });
    let (status, answer) = peer.post("/v1/runs/commit", wf, &commit).await;
    assert_eq!(status, 200, "{answer}");

    peer.scrape_until(
        "oncegate_gate_wait_seconds_count{decision=\"expired\",operation=\"send_reply\"}",
        1.0,
    )
    .await;
    let text = peer
        .scrape_until("oncegate_stale_processing_runs{namespace=\"crm\"}", 1.0)
        .await;

    for (series, at_least) in [
        ("oncegate_claims_total{namespace=\"crm\",outcome=\"claimed\"}", 4.0),
        ("oncegate_claims_total{namespace=\"crm\",outcome=\"conflict\"}", 1.0),
        ("oncegate_payload_conflicts_total{namespace=\"crm\"}", 1.0),
        ("oncegate_lease_steals_total{namespace=\"crm\"}", 1.0),
        ("oncegate_signature_failures_total{source=\"stripe\"}", 1.0),
        ("oncegate_deliveries_total{outcome=\"signature_refused\",source=\"stripe\"}", 1.0),
        ("oncegate_deliveries_total{outcome=\"accepted\",source=\"stripe\"}", 1.0),
        ("oncegate_ingress_events_total{event_type=\"charge.succeeded\",outcome=\"claimed\",source=\"stripe\"}", 1.0),
        ("oncegate_effect_attempts_total{class=\"permanent\",target=\"n8n\"}", 1.0),
        ("oncegate_run_processing_seconds_count{namespace=\"crm\",to=\"completed\"}", 1.0),
        ("oncegate_run_completion_seconds_count{namespace=\"stripe\",state=\"dead_lettered\"}", 1.0),
        ("oncegate_validation_failures_total{operation=\"refund\",outcome=\"invalid\"}", 1.0),
        ("oncegate_validation_failures_total{operation=\"refund\",outcome=\"repairs_exhausted\"}", 1.0),
        ("oncegate_valid_outputs_total{operation=\"refund\"}", 1.0),
        ("oncegate_gate_decisions_total{decision=\"expired\",operation=\"send_reply\"}", 1.0),
        ("oncegate_dead_letter_oldest_age_seconds{namespace=\"stripe\"}", 0.0),
        ("oncegate_effects_held{target=\"mail\"}", 1.0),
        ("oncegate_effects_outstanding{state=\"pending\",target=\"mail\"}", 1.0),
        ("oncegate_actions_enabled{scope=\"mail\"}", 0.0),
        ("oncegate_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/claims\",status=\"2xx\"}", 5.0),
        // Nothing moved these: each exists at zero for the configured names.
        ("oncegate_unknown_outcomes_total{target=\"mail\"}", 0.0),
        ("oncegate_retries_near_budget_total{target=\"n8n\"}", 0.0),
        ("oncegate_retry_exhaustions_total{target=\"mail\"}", 0.0),
        ("oncegate_recovered_runs_total{class=\"stranded\",namespace=\"crm\"}", 0.0),
        ("oncegate_audit_verify_failures", 0.0),
    ] {
        let v = value(&text, series).unwrap_or_else(|| panic!("{series} missing:\n{text}"));
        assert!(v >= at_least, "{series} = {v}, expected at least {at_least}");
    }
    assert_eq!(value(&text, "oncegate_audit_verify_failures"), Some(0.0));

    let exported = families(&text);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let family = |name: &str| {
        ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| exported.contains(*f)))
            .unwrap_or(name)
            .to_owned()
    };
    let alerts = read("deploy/prometheus/alerts.yml");
    let docs = read("docs/metrics.md");
    let readme = read("README.md");
    for (file, text) in [
        ("deploy/prometheus/alerts.yml", &alerts),
        ("docs/metrics.md", &docs),
        ("README.md", &readme),
    ] {
        for name in metric_words(text) {
            assert!(
                exported.contains(&family(&name)),
                "{file} names {name}, which the server does not export"
            );
        }
    }
    for name in &exported {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/metrics.md does not document {name}"
        );
    }
    for alert in alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            docs.contains(&format!("### {alert}")),
            "docs/metrics.md misses {alert}"
        );
    }
    assert!(server.stop().success());
}
