//! The Idempotency-Key proxy (DESIGN.md §10) through the real server, on
//! both backends, against a local upstream that counts what it receives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oncegate::config::{Config, Scope};
use serde_json::{json, Value};

use crate::harness::{eventually, on_both_backends, token, Backend, TestApp};
use crate::target::{Behaviour, MockTarget};

/// An app with proxy `crm` in front of `upstream` (base `/api`), its
/// target's secret `X-Api-Key`, and two proxy-scope tokens.
struct Setup {
    app: TestApp,
    upstream: MockTarget,
    /// A token with the proxy scope (subject `n8n-a`).
    a: String,
    /// Another (subject `n8n-b`).
    b: String,
}

async fn setup(backend: Backend, proxy_extra: &str, target_extra: &str) -> Setup {
    let upstream = MockTarget::start().await;
    let (a, a_entry) = token("n8n-a", &[Scope::Proxy]);
    let (b, b_entry) = token("n8n-b", &[Scope::Proxy]);
    let base = upstream.url("/api");
    let app = TestApp::spawn_with(backend, |c: &mut Config| {
        c.tokens.extend([a_entry, b_entry]);
        c.targets.push(
            toml::from_str(&format!(
                "name = \"crm\"\nbase_url = \"{base}\"\n{target_extra}\n\
                 [secret_headers]\nX-Api-Key = \"s3cr3t-key\"\n"
            ))
            .unwrap(),
        );
        c.proxies.push(
            toml::from_str(&format!("name = \"crm\"\ntarget = \"crm\"\n{proxy_extra}")).unwrap(),
        );
    })
    .await;
    Setup {
        app,
        upstream,
        a,
        b,
    }
}

impl Setup {
    fn request(&self, token: &str, key: Option<&str>, body: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .app
            .client
            .post(format!("{}/proxy/crm/leads?src=n8n", self.app.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        req
    }

    async fn answers(&self) -> i64 {
        self.app
            .db
            .count("SELECT COUNT(*) FROM proxy_answers")
            .await
    }

    async fn runs(&self) -> i64 {
        self.app
            .db
            .count("SELECT COUNT(*) FROM runs WHERE namespace = 'proxy:crm'")
            .await
    }
}

/// Status, the headers oncegate passes on, and the body bytes.
async fn parts(resp: reqwest::Response) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(n, _)| {
            !matches!(
                n.as_str(),
                "date" | "content-length" | "x-correlation-id" | "idempotent-replayed"
            ) && !n.as_str().starts_with("x-content-type")
                && !matches!(
                    n.as_str(),
                    "x-frame-options" | "referrer-policy" | "content-security-policy"
                )
        })
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    headers.sort();
    (status, headers, resp.bytes().await.unwrap().to_vec())
}

async fn problem(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()["content-type"],
        "application/problem+json",
        "status {status}"
    );
    (status, resp.json().await.unwrap())
}

async fn hundred_concurrent_one_forward_others_conflict(backend: Backend) {
    let s = Arc::new(setup(backend, "", "").await);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Behaviour::Held {
        status: 201,
        body: r#"{"id":"lead_1"}"#.into(),
        gate: gate.clone(),
    };
    s.upstream.on_path("/api/leads", held);
    let finished = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (s, finished) = (s.clone(), finished.clone());
            tokio::spawn(async move {
                let resp = s
                    .request(&s.a, Some("\"lead-42\""), r#"{"name":"Ada"}"#)
                    .send()
                    .await;
                finished.fetch_add(1, Ordering::SeqCst);
                let resp = resp.unwrap();
                let retry_after = resp.headers().get("retry-after").is_some();
                let status = resp.status().as_u16();
                (status, retry_after, resp.text().await.unwrap())
            })
        })
        .collect();
    eventually(
        "99 answered while the first is held",
        Duration::from_secs(60),
        || {
            let done = finished.load(Ordering::SeqCst);
            async move { (done >= 99).then_some(()) }
        },
    )
    .await;
    assert_eq!(
        s.upstream.requests().len(),
        1,
        "only the first went upstream"
    );
    gate.add_permits(1);
    let mut created = 0;
    for task in tasks {
        let (status, retry_after, body) = task.await.unwrap();
        match status {
            201 => {
                created += 1;
                assert_eq!(body, r#"{"id":"lead_1"}"#);
            }
            409 => {
                assert!(retry_after, "409 carries Retry-After");
                assert!(body.contains("idempotency-key-in-flight"), "{body}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(s.upstream.effects().len(), 1);
}

async fn hundred_concurrent_wait_mode_all_get_the_first_answer(backend: Backend) {
    let s = Arc::new(
        setup(
            backend,
            "in_flight = \"wait\"\nwait_ms = 10000",
            "timeout_ms = 3000\nconnect_timeout_ms = 1000",
        )
        .await,
    );
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Behaviour::Held {
        status: 201,
        body: r#"{"id":"lead_7"}"#.into(),
        gate: gate.clone(),
    };
    s.upstream.on_path("/api/leads", held);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                let resp = s
                    .request(&s.a, Some("\"lead-7\""), r#"{"name":"Ada"}"#)
                    .send()
                    .await
                    .unwrap();
                let replayed = resp.headers().get("idempotent-replayed").cloned();
                let (status, _, body) = parts(resp).await;
                (status, replayed, body)
            })
        })
        .collect();
    s.upstream
        .wait_for_requests(1, Duration::from_secs(30))
        .await;
    gate.add_permits(1);
    let mut fresh = 0;
    for task in tasks {
        let (status, replayed, body) = task.await.unwrap();
        assert_eq!(status, 201);
        assert_eq!(body, br#"{"id":"lead_7"}"#);
        match replayed {
            None => fresh += 1,
            Some(v) => assert_eq!(v, "true"),
        }
    }
    assert_eq!(fresh, 1, "one first answer, 99 replays of it");
    assert_eq!(s.upstream.requests().len(), 1);
}

async fn a_retry_replays_the_stored_answer_byte_for_byte(backend: Backend) {
    replays_byte_for_byte(backend, Replays::FromMemory).await;
}

async fn a_retry_replays_the_stored_answer_from_the_database(backend: Backend) {
    replays_byte_for_byte(backend, Replays::FromTheDatabase).await;
}

/// Where a retry's answer comes from: the answers this process completed
/// lately (the default), or the database (`replay_cache_bytes = 0`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Replays {
    FromMemory,
    FromTheDatabase,
}

async fn replays_byte_for_byte(backend: Backend, from: Replays) {
    let extra = match from {
        Replays::FromMemory => "",
        Replays::FromTheDatabase => "replay_cache_bytes = 0",
    };
    let s = setup(backend, extra, "").await;
    s.upstream.on_path(
        "/api/leads",
        Behaviour::Respond {
            status: 201,
            headers: vec![
                (
                    "content-type".into(),
                    "application/json; charset=utf-8".into(),
                ),
                ("location".into(), "/api/leads/9".into()),
                ("x-request-id".into(), "req-1".into()),
                ("set-cookie".into(), "session=abc".into()),
                ("etag".into(), "\"v1\"".into()),
            ],
            body: "{\"id\":\"lead_9\",\n \"note\":\"é\"}".into(),
        },
    );
    let first = s
        .request(&s.a, Some("\"k-9\""), "{\"name\":\"Ada\"}")
        .send()
        .await
        .unwrap();
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first = parts(first).await;
    assert_eq!(first.0, 201);
    assert!(first
        .1
        .iter()
        .any(|(n, v)| n == "location" && v == "/api/leads/9"));
    assert!(
        !first.1.iter().any(|(n, _)| n == "set-cookie"),
        "{:?}",
        first.1
    );
    for _ in 0..3 {
        let again = s
            .request(&s.a, Some("\"k-9\""), "{\"name\":\"Ada\"}")
            .send()
            .await
            .unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(
            parts(again).await,
            first,
            "status, headers and body, byte for byte"
        );
    }
    // Each replay counts as the duplicate claim it stands for.
    let text = s.app.scrape().await;
    assert!(
        text.lines().any(|l| l.starts_with("oncegate_claims_total{")
            && l.contains("outcome=\"duplicate\"")
            && l.ends_with(" 3")),
        "{text}"
    );
    // The stored answer's window ends in the database: read from there,
    // the key answers 409, and is still never forwarded a second time.
    s.app
        .db
        .exec("UPDATE proxy_answers SET expires_at = 0")
        .await;
    let after = s
        .request(&s.a, Some("\"k-9\""), "{\"name\":\"Ada\"}")
        .send()
        .await
        .unwrap();
    match from {
        // The answer this process completed is replayed from memory, the
        // database unread, until its window or ten minutes pass.
        Replays::FromMemory => {
            assert_eq!(after.headers()["idempotent-replayed"], "true");
            assert_eq!(parts(after).await, first);
        }
        Replays::FromTheDatabase => {
            let (status, p) = problem(after).await;
            assert_eq!(status, 409);
            assert_eq!(
                p["type"],
                "urn:oncegate:problem:idempotency-key-answer-expired"
            );
        }
    }
    let seen = s.upstream.requests();
    assert_eq!(seen.len(), 1, "the retries never reached the upstream");
    let sent = &seen[0];
    assert_eq!(sent.query.as_deref(), Some("src=n8n"));
    assert_eq!(sent.body, b"{\"name\":\"Ada\"}");
    assert_eq!(sent.header("x-api-key"), Some("s3cr3t-key"));
    assert_eq!(
        sent.header("authorization"),
        None,
        "the caller's token stays behind"
    );
    assert_eq!(sent.header("idempotency-key"), Some("proxy:crm:n8n-a:k-9"));
    let stored = s.app.db.text("SELECT headers FROM proxy_answers").await;
    assert!(
        !stored.contains("s3cr3t") && !stored.contains("session=abc"),
        "{stored}"
    );
    let req = s
        .app
        .client
        .get(format!("{}/v1/runs", s.app.base))
        .query(&[("namespace", "proxy:crm"), ("key", "n8n-a:k-9")])
        .bearer_auth(&s.app.operator);
    let (status, run) = crate::harness::answer(req).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["state"], "completed");
    assert_eq!(run["result"]["status"], 201);
}

async fn another_body_is_422_and_another_caller_is_independent(backend: Backend) {
    let s = setup(backend, "", "").await;
    s.upstream
        .on_path("/api/leads", Behaviour::json(201, r#"{"id":"x"}"#));
    let ok = s
        .request(&s.a, Some("\"shared\""), r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let (status, p) = problem(
        s.request(&s.a, Some("\"shared\""), r#"{"n":2}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(p["type"], "urn:oncegate:problem:idempotency-key-reused");
    assert_eq!(p["field"], "Idempotency-Key");
    assert_eq!(s.upstream.requests().len(), 1, "the 422 sent nothing");
    let other = s
        .request(&s.b, Some("\"shared\""), r#"{"n":2}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 201, "another subject's key is its own");
    assert!(other.headers().get("idempotent-replayed").is_none());
    assert_eq!(s.upstream.requests().len(), 2);
    assert_eq!(s.runs().await, 2);
    // The ledger's claim API cannot touch the proxy's namespace.
    let (status, p) = s
        .app
        .claim(json!({"namespace": "proxy:crm", "key": "n8n-a:other", "payload": {}}))
        .await;
    assert_eq!(status, 403, "{p}");
    assert_eq!(p["type"], "urn:oncegate:problem:namespace-reserved");
}

async fn a_late_answer_leaves_the_key_unknown_until_resolved(backend: Backend) {
    let s = setup(backend, "", "timeout_ms = 300").await;
    s.upstream.on_path("/api/leads", Behaviour::CommitThenHang);
    let (status, p) = problem(
        s.request(&s.a, Some("\"slow\""), "{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502, "{p}");
    assert_eq!(p["type"], "urn:oncegate:problem:upstream-outcome-unknown");
    for _ in 0..50 {
        let (status, p) = problem(
            s.request(&s.a, Some("\"slow\""), "{}")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 409, "{p}");
        assert_eq!(
            p["type"],
            "urn:oncegate:problem:idempotency-key-outcome-unknown"
        );
    }
    assert_eq!(
        s.upstream.requests().len(),
        1,
        "no retry reached the upstream"
    );
    let open = "SELECT COUNT(*) FROM dead_letters WHERE namespace = 'proxy:crm' \
                AND class = 'unknown_outcome' AND resolved_at IS NULL";
    assert_eq!(s.app.db.count(open).await, 1);

    // Not found upstream: released, and the next request goes out again.
    let resolve = |finding: &str, key: &str| {
        json!({"proxy": "crm", "subject": "n8n-a", "key": key, "finding": finding,
               "note": "checked the CRM by reference"})
    };
    let (status, body) = s
        .app
        .post(
            "/v1/proxy/resolve",
            Some(&s.app.operator),
            &resolve("not_found", "slow"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run"]["state"], "failed_retryable");
    s.upstream
        .on_path("/api/leads", Behaviour::json(201, r#"{"id":"late"}"#));
    let again = s
        .request(&s.a, Some("\"slow\""), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(s.upstream.requests().len(), 2);

    // Found upstream: closed, never forwarded again.
    s.upstream.on_path("/api/leads", Behaviour::CommitThenHang);
    let lost = s
        .request(&s.a, Some("\"slow-2\""), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(lost.status(), 502);
    let (status, body) = s
        .app
        .post(
            "/v1/proxy/resolve",
            Some(&s.app.operator),
            &resolve("found", "slow-2"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run"]["state"], "failed_terminal");
    let (status, p) = problem(
        s.request(&s.a, Some("\"slow-2\""), "{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409, "{p}");
    assert_eq!(p["type"], "urn:oncegate:problem:idempotency-key-closed");
    assert!(p["detail"].as_str().unwrap().contains("found"), "{p}");
    assert_eq!(s.upstream.requests().len(), 3);
    let (status, _) = s
        .app
        .post(
            "/v1/proxy/resolve",
            Some(&s.app.operator),
            &resolve("found", "never"),
        )
        .await;
    assert_eq!(status, 409, "a key that is not unknown cannot be resolved");
}

async fn bad_requests_and_unkeepable_answers_store_nothing(backend: Backend) {
    let s = setup(
        backend,
        "max_request_bytes = 64\nmax_response_bytes = 1024",
        "",
    )
    .await;
    s.upstream.on_path("/api/leads", Behaviour::json(201, "{}"));
    for (key, says) in [
        (None, "idempotency-key-missing"),
        (Some("unquoted-key"), "idempotency-key-malformed"),
        (Some("\"a\";p=1"), "idempotency-key-malformed"),
    ] {
        let (status, p) = problem(s.request(&s.a, key, "{}").send().await.unwrap()).await;
        assert_eq!(status, 400, "{p}");
        assert_eq!(p["type"], format!("urn:oncegate:problem:{says}"));
        assert_eq!(p["field"], "Idempotency-Key");
        assert!(
            p["detail"].as_str().unwrap().contains("Idempotency-Key"),
            "{p}"
        );
    }
    let (status, p) = problem(
        s.request(&s.a, Some("\"big\""), &"x".repeat(65))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413, "{p}");
    let escape = s
        .app
        .client
        .post(format!("{}/proxy/crm/..%2f..%2fadmin", s.app.base))
        .bearer_auth(&s.a)
        .header("Idempotency-Key", "\"esc\"")
        .body("{}");
    let (status, p) = problem(escape.send().await.unwrap()).await;
    assert_eq!(status, 400, "{p}");
    assert_eq!(p["type"], "urn:oncegate:problem:proxy-path-outside-target");
    assert_eq!(s.upstream.requests().len(), 0, "none of these was sent");
    assert_eq!(s.runs().await, 0, "none of these touched the ledger");

    // An answer longer than the bound, and one that never ends: 502, not kept.
    s.upstream
        .on_path("/api/big", Behaviour::json(201, &"y".repeat(4096)));
    s.upstream.on_path("/api/stream", Behaviour::Stream);
    for path in ["big", "stream"] {
        let url = format!("{}/proxy/crm/{path}", s.app.base);
        let send = || {
            s.app
                .client
                .post(&url)
                .bearer_auth(&s.a)
                .header("Idempotency-Key", format!("\"{path}\""))
                .body("{}")
        };
        let (status, p) = problem(send().send().await.unwrap()).await;
        assert_eq!(status, 502, "{p}");
        assert_eq!(p["type"], "urn:oncegate:problem:upstream-answer-unreadable");
        let (status, p) = problem(send().send().await.unwrap()).await;
        assert_eq!(
            status, 409,
            "{path}: the request went upstream once, never again: {p}"
        );
    }
    assert_eq!(s.upstream.requests().len(), 2);
    assert_eq!(s.answers().await, 0, "no answer was kept");

    // The kill switch: 503, nothing sent.
    s.app
        .state
        .kill_switch
        .set("crm", false, "test", &s.app.state.wake)
        .await
        .unwrap();
    let (status, p) = problem(
        s.request(&s.a, Some("\"held\""), "{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503, "{p}");
    assert_eq!(p["type"], "urn:oncegate:problem:actions-disabled");
    assert_eq!(s.upstream.requests().len(), 2);
}

async fn an_interrupted_forward_is_unknown_and_the_cli_resolves_it(backend: Backend) {
    let s = setup(backend, "", "").await;
    s.upstream
        .on_path("/api/leads", Behaviour::json(201, r#"{"id":"again"}"#));
    // A forward that stopped before its answer was recorded (the process
    // died mid-forward): the key's run holds a lease that has expired.
    let inbound = oncegate::proxy::request::Inbound {
        method: axum::http::Method::POST,
        path: "/leads".into(),
        query: Some("src=n8n".into()),
        headers: axum::http::HeaderMap::new(),
        body: axum::body::Bytes::from_static(b"{}"),
    };
    let proxy = s.app.state.proxies.get("crm").unwrap();
    let claim = oncegate::ledger::ClaimRequest {
        namespace: proxy.namespace.clone(),
        key: oncegate::ledger::IdempotencyKey::parse("n8n-a:cut").unwrap(),
        business_key: None,
        payload_hash: inbound.fingerprint(&proxy.config),
        lease_ms: 100,
        metadata: Default::default(),
        claimed_by: "n8n-a".into(),
    };
    s.app.store.claim(&claim).await.unwrap();
    // While the lease lives the key is in flight; once it ends, unknown.
    let unknown = "urn:oncegate:problem:idempotency-key-outcome-unknown";
    eventually("the lease to end", Duration::from_secs(10), || async {
        let resp = s.request(&s.a, Some("\"cut\""), "{}").send().await.unwrap();
        let (status, p) = problem(resp).await;
        assert_eq!(status, 409, "{p}");
        (p["type"] == unknown).then_some(())
    })
    .await;
    assert_eq!(
        s.upstream.requests().len(),
        0,
        "an interrupted forward is never resent"
    );

    let cli = |finding: &'static str| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(["proxy", "resolve", "--proxy", "crm", "--subject", "n8n-a"])
            .args(["--key", "cut", finding, "--note", "no lead in the CRM"])
            .env("ONCEGATE_URL", &s.app.base)
            .env("ONCEGATE_TOKEN", &s.app.operator)
            .env_remove("ONCEGATE_CONFIG")
            .output()
    };
    let out = cli("--not-found").await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("failed_retryable"), "{text}");
    let again = s.request(&s.a, Some("\"cut\""), "{}").send().await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(s.upstream.requests().len(), 1);
    let out = cli("--found").await.unwrap();
    assert!(!out.status.success(), "a completed key is not unknown");
}

on_both_backends!(
    an_interrupted_forward_is_unknown_and_the_cli_resolves_it,
    hundred_concurrent_one_forward_others_conflict,
    hundred_concurrent_wait_mode_all_get_the_first_answer,
    a_retry_replays_the_stored_answer_byte_for_byte,
    a_retry_replays_the_stored_answer_from_the_database,
    another_body_is_422_and_another_caller_is_independent,
    a_late_answer_leaves_the_key_unknown_until_resolved,
    bad_requests_and_unkeepable_answers_store_nothing,
);
