//! A console or approval session is bound to the token that opened it
//! (issue 25 M8): once that token is removed from the configuration, the
//! session ends, whatever its cookie's lifetime.

use oncegate::config::Scope;

use crate::harness::{on_both_backends, token, Backend, TestDb};
use crate::process::{write_config_with, Server};

on_both_backends!(a_session_ends_when_its_token_is_removed);

fn operator_entry(digest: &str) -> String {
    format!("[[tokens]]\nsubject = \"olga\"\ndigest = \"{digest}\"\nscopes = [\"operator\"]\n")
}

async fn a_session_ends_when_its_token_is_removed(backend: Backend) {
    let db = TestDb::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let (olga, entry) = token("olga", &[Scope::Operator]);
    let (config, _) = write_config_with(dir.path(), &db.url, &operator_entry(&entry.digest));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let server = Server::start(&config, dir.path(), &[]);
    let resp = client
        .post(format!("{}/login", server.base))
        .form(&[("token", olga.as_str()), ("next", "/ui/dead-letters")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = |base: String| {
        let client = client.clone();
        let cookie = cookie.clone();
        async move {
            client
                .get(format!("{base}/ui/dead-letters"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(page(server.base.clone()).await, 200, "signed in");
    assert!(server.stop().success());

    // The same token again: the session survives a restart.
    let server = Server::start(&config, dir.path(), &[]);
    assert_eq!(
        page(server.base.clone()).await,
        200,
        "same token, same session"
    );
    assert!(server.stop().success());

    // The token removed: the cookie no longer signs anyone in, and the
    // session row is gone.
    let (config, _) = write_config_with(dir.path(), &db.url, "");
    let server = Server::start(&config, dir.path(), &[]);
    let status = page(server.base.clone()).await;
    assert_ne!(status, 200, "a removed token's session must end");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM sessions WHERE subject = 'olga'")
            .await,
        0
    );
    assert!(server.stop().success());
}
